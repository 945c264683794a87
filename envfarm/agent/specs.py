"""Installed agents as plug-ins: a small spec per harness (docs/agents.md).

A spec says how to install the agent (pip packages into a private virtualenv, or npm packages
into a private ``node_modules``, both under ``AGENT_DIR``), the command line that runs it with
the task's instruction, the environment variables that point it at the capture endpoint, which
API it speaks, which exit codes mean it ended by itself, and how it takes the task's MCP servers
(``mcp``, below: Harbor's capability check, so a task whose MCP servers an agent cannot use is
refused rather than run as a different task). Shipped specs live in
``envfarm/agent/agents/*.toml``; ``--agent-spec FILE`` loads a user's own in the same format.
"""

from __future__ import annotations

import shlex
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envfarm.errors import TaskSpecError
from envfarm.sandbox.images.agent_layer import AGENT_DIR, MISSING_RUNTIME_EXIT, AgentLayer
from envfarm.spec.mcp import McpServer, mcp_section

McpSupport = Literal["instruction", "config", "none"]
MCP_ENV = "ENVFARM_MCP_SERVERS"
"""The variable that holds the task's MCP servers (a JSON list) for every installed agent."""

BUILTIN = "builtin"
"""The name of envfarm's own tool loop, the default."""
VENV = f"{AGENT_DIR}/venv"
API_KEY = "envfarm-capture"
"""The only key an agent ever holds: the capture endpoint accepts any."""


class AgentInstall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    runtime: Literal["python3", "none"] = "none"
    """``python3``: the image's python3 (Debian's, apt-installed, when the image has apt but
    no python3); ``none``: the agent brings its own (a static binary, say)."""
    pip: list[str] = Field(default_factory=list)
    npm: list[str] = Field(default_factory=list)
    """npm packages, installed into ``{agent_dir}/node_modules`` on envfarm's own Node image
    and copied in; the task's image has no Node to offer, so they must run without it (a
    package that ships a native binary, as Codex CLI does)."""
    script: str = ""
    """More shell run as root after the packages are installed (``{agent_dir}`` filled in)."""


class AgentRun(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str
    """Shell command; ``{instruction}`` (quoted), ``{base_url}``, ``{model}``, ``{agent_dir}``,
    ``{workdir}``, ``{api_key}`` and ``{mcp_servers}`` (the task's MCP servers as a quoted JSON
    list, ``[]`` when none) are filled in."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables for the agent; the same placeholders apply."""
    done_exit_codes: list[int] = Field(default_factory=lambda: [0])
    """Exit codes that mean the agent finished by itself (``submitted``)."""


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    version: str
    api: Literal["chat", "responses", "messages"] = "chat"
    install: AgentInstall = Field(default_factory=AgentInstall)
    run: AgentRun
    mcp: McpSupport = "none"
    """How the agent takes the task's ``[[environment.mcp_servers]]``: ``instruction``, the
    section Harbor's own loops append to the instruction; ``config``, the agent configures its
    MCP client itself from ``{mcp_servers}`` or ``$ENVFARM_MCP_SERVERS`` (both JSON); ``none``,
    it cannot, and a task that declares MCP servers is refused for it."""
    skills: str = ""
    """Where the agent reads agent skills (``$HOME`` expands): the task's ``skills_dir`` is
    copied there before it runs (``agent/skills.py``); empty, it takes none, and a task with a
    ``skills_dir`` is refused for it, as Harbor refuses it for an agent without skills."""

    def mcp_refusal(self, servers: list[McpServer]) -> str | None:
        """Why this agent cannot run a task with ``servers``; None when it can."""
        if not servers or self.mcp != "none":
            return None
        return (
            f"the task declares MCP servers ([[environment.mcp_servers]]: "
            f"{', '.join(s.name for s in servers)}) and agent {self.name} cannot use them "
            "(its spec has no `mcp`); use the built-in agent or an agent spec with "
            'mcp = "instruction" or "config"'
        )

    def skills_refusal(self, skills_dir: str | None) -> str | None:
        """Why this agent cannot run a task with ``skills_dir``; None when it can."""
        if not skills_dir or self.skills:
            return None
        return (
            f"the task gives the agent skills (environment.skills_dir = {skills_dir!r}) and "
            f"agent {self.name} cannot take them (its spec has no `skills`); use the built-in "
            "agent or an agent spec with `skills`"
        )

    def refusal(self, servers: list[McpServer], skills_dir: str | None) -> str | None:
        """Why this agent cannot run a task; None when it can."""
        return self.mcp_refusal(servers) or self.skills_refusal(skills_dir)

    def agent_instruction(self, instruction: str, servers: list[McpServer]) -> str:
        return instruction + mcp_section(servers) if self.mcp == "instruction" else instruction

    def layer(self) -> AgentLayer:
        return AgentLayer(
            name=self.name,
            version=self.version,
            script=install_script(self),
            npm=list(self.install.npm),
            shared_script=shared_script(self),
        )

    def fill(
        self,
        text: str,
        *,
        instruction: str,
        base_url: str,
        model: str,
        workdir: str,
        mcp_servers: str = "[]",
    ) -> str:
        values = {
            "instruction": shlex.quote(instruction),
            "mcp_servers": shlex.quote(mcp_servers),
            "base_url": base_url,
            "model": model,
            "agent_dir": AGENT_DIR,
            "workdir": workdir,
            "api_key": API_KEY,
        }
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        return text


def _python_lines(spec: AgentSpec) -> list[str]:
    missing = (
        f"echo 'envfarm: agent {spec.name} needs python3 (with venv), which this image "
        f"lacks and cannot install (no apt-get)' >&2; exit {MISSING_RUNTIME_EXIT}"
    )
    return [
        "if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' "
        ">/dev/null 2>&1; then",
        f"  command -v apt-get >/dev/null 2>&1 || {{ {missing}; }}",
        "  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
        "--no-install-recommends python3 python3-venv >/dev/null",
        "fi",
    ]


def _venv_lines(spec: AgentSpec, indent: str = "") -> list[str]:
    lines = [f"rm -rf {VENV}", f"python3 -m venv {VENV}"]
    if spec.install.pip:
        packages = " ".join(shlex.quote(p) for p in spec.install.pip)
        lines.append(
            f"{VENV}/bin/pip install --no-cache-dir -q --disable-pip-version-check {packages}"
        )
    return [indent + line for line in lines]


def shared_script(spec: AgentSpec) -> str:
    """The install run once per base image (its ``AGENT_DIR`` copied into each task's layer):
    the virtualenv and its pip packages; empty for an agent without them."""
    if spec.install.runtime != "python3":
        return ""
    return "\n".join(["set -e", f"mkdir -p {AGENT_DIR}", *_python_lines(spec), *_venv_lines(spec)])


def install_script(spec: AgentSpec) -> str:
    """The install run in the task image's layer. A virtualenv copied from the base image's
    shared install is kept when its interpreter is the image's own ``python3``; otherwise (the
    task replaced Python, or nothing was copied) it is made again here."""
    lines = ["set -e", f"mkdir -p {AGENT_DIR}"]
    if spec.install.runtime == "python3":
        version = "-c 'import sys; print(sys.version)'"
        lines += [
            *_python_lines(spec),
            f'if [ "$({VENV}/bin/python {version} 2>/dev/null)" != "$(python3 {version})" ]; then',
            *_venv_lines(spec, "  "),
            "fi",
        ]
    if spec.install.script:
        lines.append(spec.install.script.replace("{agent_dir}", AGENT_DIR))
    lines.append(  # only what needs it: a chmod copies each file it touches into the layer
        f"find {AGENT_DIR} \\( ! -perm -a+r -o -type d ! -perm -a+x \\) -exec chmod a+rX {{}} +"
    )
    return "\n".join(lines) + "\n"


def builtin_specs() -> dict[str, AgentSpec]:
    found: dict[str, AgentSpec] = {}
    for entry in resources.files("envfarm.agent").joinpath("agents").iterdir():
        if entry.name.endswith(".toml"):
            spec = _parse(entry.read_text(), f"envfarm/agent/agents/{entry.name}")
            found[spec.name] = spec
    return found


def agent_names() -> list[str]:
    return [BUILTIN, *sorted(builtin_specs())]


def resolve_agent(name: str | None, spec_file: Path | None = None) -> AgentSpec | None:
    """The spec of ``--agent NAME`` or ``--agent-spec FILE``; None for the built-in loop."""
    if spec_file is not None:
        return parse_spec(read_spec_file(spec_file), str(spec_file))
    if name is None or name == BUILTIN:
        return None
    specs = builtin_specs()
    if name not in specs:
        raise TaskSpecError(
            "--agent", f"unknown agent {name!r}; the agents are: {', '.join(agent_names())}"
        )
    return specs[name]


def _parse(text: str, where: str) -> AgentSpec:
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskSpecError(where, f"not valid TOML: {exc}") from exc
    return parse_spec(table, where)


def read_spec_file(path: Path) -> dict[str, Any]:
    """The table of an agent spec file (checked: TaskSpecError naming the field if invalid)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TaskSpecError(str(path), f"cannot read the agent spec: {exc}") from exc
    return _parse(text, str(path)).model_dump()


def parse_spec(table: dict[str, Any], where: str) -> AgentSpec:
    try:
        return AgentSpec.model_validate(table)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise TaskSpecError(where, f"not a valid agent spec: {problems}") from exc
