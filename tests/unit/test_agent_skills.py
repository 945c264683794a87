"""Agent skills as Harbor hands them to agents (envfarm/agent/skills.py, the agent specs)."""

from __future__ import annotations

from envfarm.agent.skills import copy_command, front_matter, section
from envfarm.agent.specs import builtin_specs
from envfarm.spec.config import TaskConfig


def test_a_skill_is_named_by_its_front_matter() -> None:
    text = "---\nname: greet\ndescription: Says hello.\n---\n# Greet\n"
    assert front_matter(text) == ("greet", "Says hello.")
    assert front_matter("# no front matter\n") is None
    assert front_matter("---\nname: only\n---\n") is None


def test_the_section_lists_each_skill_and_is_empty_without() -> None:
    assert section([]) == ""
    shown = section([("a", "x < y", "/s/a/SKILL.md")])
    assert shown.startswith("\n<available_skills>\n  <skill>\n    <name>a</name>")
    assert "<description>x &lt; y</description>" in shown


def test_codex_takes_skills_and_mini_swe_agent_is_refused_as_under_harbor() -> None:
    specs = builtin_specs()
    assert specs["codex"].refusal([], "/skills") is None
    refusal = specs["mini-swe-agent"].refusal([], "/skills")
    assert refusal is not None
    assert "skills_dir = '/skills'" in refusal
    assert specs["mini-swe-agent"].refusal([], None) is None
    assert specs["mini-swe-agent"].refusal([], "") is None
    assert copy_command("/skills", "$HOME/.agents/skills") == (
        "(mkdir -p $HOME/.agents/skills && cp -r /skills/* $HOME/.agents/skills/ "
        "2>/dev/null || true)"
    )


def test_skills_dir_is_read() -> None:
    config = TaskConfig.model_validate({"environment": {"skills_dir": "/skills"}})
    assert config.environment.skills_dir == "/skills"
