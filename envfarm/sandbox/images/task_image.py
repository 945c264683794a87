"""A task's image as envfarm builds it, whatever the engine: the external bases its Dockerfile
names, those bases pointed at the local images that stand in for them, and the tag the result
carries.

The bases are every ``FROM`` and ``COPY --from=`` that names no earlier stage (nor ``scratch``),
with the ``ARG`` defaults given before the first ``FROM`` applied; a base that uses an ``ARG``
without a default is refused, naming it. Where each base comes from (an image the engine holds,
a pull, the alias table's recipe) the docker side decides (``docker/images.py``); the
Kubernetes backend names the same tag behind its registry (``kubernetes/podimages.py``).
"""

from __future__ import annotations

import re

from envfarm.errors import ImageError, UnknownBaseImage
from envfarm.sandbox.images.dockerlines import Instruction, Source, instructions


def task_image_tag(task_id: str, content_hash: str) -> str:
    """``envfarm-task/<sanitised id>:<content_hash[:16]>`` (a valid docker reference)."""
    name = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:100].strip("-") or "task"
    version = re.sub(r"[^A-Za-z0-9_.-]", "", content_hash).lstrip(".-")[:16]
    if not version:
        raise ImageError(f"task {task_id}: content hash {content_hash!r} gives no image tag")
    return f"envfarm-task/{name}:{version}"


def _substitute(value: str, args: dict[str, str], where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        default = match.group(2)
        if args.get(name):
            return args[name]
        if default is not None:
            return default
        raise UnknownBaseImage(
            f"{where}: the base image uses ${name}, which has no default value in an ARG "
            f"before the first FROM; give it one (ARG {name}=...)"
        )

    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(?=\w)(\w+)", replace, value)


def _from_parts(args: str) -> tuple[str, str | None]:
    """``[--platform=..] image [AS name]`` -> (image, stage name)."""
    words = [w for w in args.split() if not w.startswith("--")]
    if not words:
        return "", None
    stage = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
    return words[0], stage


def _external_refs(text: str, where: str) -> list[tuple[Instruction, str, str]]:
    """(instruction, reference as written, resolved reference) for every non-stage base."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    refs = []
    seen_from = False
    for inst in instructions(text):
        if inst.keyword == "ARG" and not seen_from:
            for word in inst.args.split():
                name, _, value = word.partition("=")
                args[name] = value.strip("\"'")
        elif inst.keyword == "FROM":
            seen_from = True
            image, stage = _from_parts(inst.args)
            if not image:
                raise ImageError(f"{where}: line {inst.first + 1}: FROM without an image")
            resolved = _substitute(image, args, where)
            if resolved.lower() not in stages and resolved != "scratch":
                refs.append((inst, image, resolved))
            if stage:
                stages.add(stage.lower())
        elif inst.keyword == "COPY":
            match = re.search(r"--from=(\S+)", inst.args)
            if match and match.group(1).lower() not in stages and not match.group(1).isdigit():
                refs.append((inst, match.group(1), _substitute(match.group(1), args, where)))
    return refs


def dockerfile_bases(text: str, where: str) -> list[str]:
    """External base references (ARG defaults applied), in order, without duplicates."""
    return list(dict.fromkeys(resolved for _, _, resolved in _external_refs(text, where)))


def rewrite_dockerfile(text: str, images: dict[str, str], where: str) -> str:
    """Point every external base at ``images[reference]``; stages and ``scratch`` untouched.

    A rewritten ``FROM`` loses its ``--platform`` flag (local images have the engine's own
    platform) and becomes one line.
    """
    source = Source.of(text)
    rewrite_source(source, images, where)
    return source.text


def rewrite_source(source: Source, images: dict[str, str], where: str) -> None:
    """``rewrite_dockerfile`` on a ``Source``, in place."""
    for inst, written, resolved in reversed(_external_refs(source.text, where)):
        target = images[resolved]
        if inst.keyword == "FROM":
            _, stage = _from_parts(inst.args)
            new = f"FROM {target}" + (f" AS {stage}" if stage else "")
            source.splice(inst.first, inst.last, [new])
        else:
            for number in range(inst.first, inst.last + 1):
                line = source.lines[number].replace(f"--from={written}", f"--from={target}")
                source.lines[number] = line
