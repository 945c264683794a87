"""A task's agent skills (``environment.skills_dir``), given to the agent as Harbor 0.26 does.

The skills are directories ``<skill>/SKILL.md`` (YAML front matter with ``name`` and
``description``) under ``skills_dir`` in the task's environment, usually put there by its
Dockerfile. Harbor hands them to each agent its own way:

- its own loop (Terminus 2), envfarm's built-in loop here, appends an ``<available_skills>``
  section to the instruction, one ``<skill>`` each with its name, description and the path of
  its ``<skill>/SKILL.md``, read from the environment when the agent starts (``skills_section``);
- an installed agent that reads skills from a directory of its own gets ``skills_dir``'s
  contents copied there, as the agent's user, before it runs (``copy_command``; the agent
  spec's ``skills``: Codex reads ``$HOME/.agents/skills``);
- an agent that takes no skills (Harbor's ``capabilities.skills`` false, mini-swe-agent) is
  refused for such a task; the oracle and the nop agent ignore skills.
"""

from __future__ import annotations

import re
import shlex
from xml.etree.ElementTree import Element, SubElement, indent, tostring

import yaml

from envfarm.sandbox.base import Sandbox

_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)", re.DOTALL)
READ_TIMEOUT_S = 10.0


def front_matter(text: str) -> tuple[str, str] | None:
    """(name, description) of a ``<skill>/SKILL.md``; None without both."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return None
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return None
    if not isinstance(data, dict) or "name" not in data or "description" not in data:
        return None
    return str(data["name"]), str(data["description"])


def section(skills: list[tuple[str, str, str]]) -> str:
    """Harbor's ``<available_skills>`` block for (name, description, location); "" if none."""
    if not skills:
        return ""
    root = Element("available_skills")
    for name, description, location in skills:
        skill = SubElement(root, "skill")
        SubElement(skill, "name").text = name
        SubElement(skill, "description").text = description
        SubElement(skill, "location").text = location
    indent(root, space="  ")
    return "\n" + tostring(root, encoding="unicode")


async def skills_section(sandbox: Sandbox, skills_dir: str | None) -> str:
    """The section for the skills found under ``skills_dir`` in the sandbox now ("" if none)."""
    if not skills_dir:
        return ""
    where = shlex.quote(skills_dir)
    found = await sandbox.exec(
        f"[ -d {where} ] && find {where} -mindepth 2 -maxdepth 2 -name SKILL.md -type f | sort",
        timeout=READ_TIMEOUT_S,
    )
    if found.exit_code != 0:
        return ""
    skills = []
    for path in found.stdout.split("\n"):
        if not path.strip():
            continue
        try:
            text = (await sandbox.read_file(path)).decode("utf-8", "replace")
        except OSError:
            continue
        named = front_matter(text)
        if named is not None:
            skills.append((*named, path))
    return section(skills)


def copy_command(skills_dir: str, target: str) -> str:
    """Shell that copies ``skills_dir``'s contents to ``target`` (``$HOME`` expands), as
    Harbor's installed agents do; a missing or empty ``skills_dir`` copies nothing."""
    return f"(mkdir -p {target} && cp -r {shlex.quote(skills_dir)}/* {target}/ 2>/dev/null || true)"
