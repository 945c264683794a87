"""Build every offline substitute of images/aliases.toml and run a version command in each.

For each recipe: build it (and its parents) unless built, then run its check command in a
fresh container, and print one table row: recipe, Debian suite, build seconds (0 when it was
already built), image size, and the first line the check printed. The baseline is the same
run's ``base`` (Debian 12) image: sizes are also given as a ratio to it. Exits non-zero when a
build or a check failed. Prints the table, then one JSON object as its last line.

Usage: python bench/images.py [RECIPE...]   (default: every recipe)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time

from envfarm.errors import EnvfarmError
from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.images.task_images import ensure_recipe_image
from envfarm.sandbox.images.aliases import load_alias_table

PIP_UPGRADE = (
    "pip install -q --root-user-action=ignore --upgrade pip==24.0 packaging==24.1 setuptools "
    "&& pip --version"
)
"""What Dockerfiles on python:* do first; fails if apt owns pip or packaging (uninstall)."""
CHECKS = {
    "base": "cat /etc/debian_version",
    "base-trixie": "cat /etc/debian_version",
    "buildpack-deps": "gcc --version",
    "buildpack-deps-trixie": "gcc --version",
    "python-slim": f"python --version && pip --version && {PIP_UPGRADE}",
    "python": f"python --version && python3-config --includes && {PIP_UPGRADE}",
    "python-slim-trixie": f"python --version && pip --version && {PIP_UPGRADE}",
    "python-trixie": f"python --version && python3-config --includes && {PIP_UPGRADE}",
    "golang": "go version && test -x /usr/local/go/bin/go && go env GOPATH GOTOOLCHAIN",
    "rust": "rustc --version && cargo --version && cargo fmt --version",
    "jdk21": "java -version 2>&1 && javac -version && test -x $JAVA_HOME/bin/java",
    "maven21": "mvn -v 2>&1 | head -3",
    "jdk17": "java -version 2>&1 && javac -version && test -x $JAVA_HOME/bin/java",
    "maven17": "mvn -v 2>&1 | head -3",
    "node": "node --version && npm --version && npm config get registry",
    "tbench-ubuntu": "tmux -V && asciinema --version",
    "tbench-python": "python --version && tmux -V",
    "postgres": "postgres --version",
    "redis": "redis-server --version",
}
UV_CHECK = ["/uv", "--version"]  # the uv image has no shell


def _size_mb(tag: str) -> float:
    return round(float(docker_client().images.get(tag).attrs["Size"]) / 1e6, 1)


def _check(recipe: str, tag: str) -> str:
    command = UV_CHECK if recipe == "uv" else ["sh", "-c", CHECKS.get(recipe, "true")]
    output = docker_client().containers.run(tag, command, remove=True, entrypoint=[])
    return re.sub(r"\x1b\[[0-9;]*m", "", bytes(output).decode(errors="replace")).strip()


async def measure(recipe: str) -> dict[str, object]:
    table = load_alias_table()
    started = time.monotonic()
    row: dict[str, object] = {"recipe": recipe, "suite": table.suite_of(recipe)}
    try:
        built = await ensure_recipe_image(recipe)
        row["build_s"] = 0.0 if built.cached else round(time.monotonic() - started, 1)
        row["size_mb"] = _size_mb(built.tag)
        output = await asyncio.to_thread(_check, recipe, built.tag)
        row["check"] = " | ".join(output.splitlines()[:3])
        row["ok"] = True
    except (EnvfarmError, OSError) as exc:
        row.update(ok=False, check=f"FAILED: {str(exc).splitlines()[-1][:200]}")
    except Exception as exc:  # a container that exits non-zero: docker's ContainerError
        row.update(ok=False, check=f"FAILED: {type(exc).__name__}: {str(exc)[-200:]}")
    return row


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("recipes", nargs="*")
    names = parser.parse_args().recipes or list(load_alias_table().recipes)
    rows = [await measure(name) for name in dict.fromkeys(["base", *names])]
    base_size = next(float(r["size_mb"]) for r in rows if r["recipe"] == "base")  # type: ignore[arg-type]
    print("| recipe | suite | build s | size MB | size / base | check |")
    print("| --- | --- | ---: | ---: | ---: | --- |")
    for row in rows:
        size = row.get("size_mb")
        ratio = f"{float(size) / base_size:.1f}x" if isinstance(size, float) else "-"
        print(
            f"| {row['recipe']} | {row['suite']} | {row.get('build_s', '-')} | {size or '-'} | "
            f"{ratio} | {row['check']} |"
        )
    print(json.dumps({"rows": rows}))
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
