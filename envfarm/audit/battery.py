"""The audit's battery: probes as data, loaded from TOML into checked models.

The battery shipped in the package (``envfarm/audit/battery.toml``) is the reference of what
a developer's workstation shows (``docs/audit.md``); a user's file given with ``--battery``
is merged into it by probe id (a probe of the same id replaces the shipped one, a new id is
added, ``enabled = false`` drops one). Each probe is one bash command, run as the agent's own
``bash`` tool runs it, and a rule that decides from its output whether it shows a tell:

- ``match``: a tell when ``pattern`` matches (the evidence is what matched);
- ``absent``: a tell when ``pattern`` does not match (the evidence is the whole output);
- ``compare``: ``pattern``'s named groups ``a`` and ``b`` (or ``a`` and the constant ``than``)
  are numbers; a tell when ``a <op> b`` holds. No match: nothing to compare, no tell.

Patterns are Python regular expressions searched in multi-line mode.
"""

from __future__ import annotations

import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from envfarm.errors import BatteryError

SHIPPED = "envfarm/audit/battery.toml"
Severity = Literal["low", "medium", "high"]
Op = Literal["lt", "le", "gt", "ge", "eq", "ne"]


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pattern: str

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern, re.MULTILINE)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return pattern

    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.MULTILINE)


class MatchRule(_Rule):
    kind: Literal["match"]


class AbsentRule(_Rule):
    kind: Literal["absent"]


class CompareRule(_Rule):
    kind: Literal["compare"]
    op: Op
    than: float | None = None
    """The right-hand side when ``pattern`` has no group ``b``."""

    @model_validator(mode="after")
    def _operands(self) -> CompareRule:
        groups = self.regex().groupindex
        if "a" not in groups:
            raise ValueError("a compare pattern needs a named group `a` (?P<a>...)")
        if ("b" in groups) == (self.than is not None):
            raise ValueError("give the right-hand side as a named group `b` or as `than`, once")
        return self


Rule = Annotated[MatchRule | AbsentRule | CompareRule, Field(discriminator="kind")]


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    category: str = Field(min_length=1)
    command: str = Field(min_length=1)
    """One bash command, run as the agent's ``bash`` tool runs it; it should exit 0."""
    rule: Rule
    reference: str = Field(min_length=1)
    """What a developer's Linux workstation shows instead (the judged-against reference)."""
    severity: Severity = "medium"
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    exit_codes: list[int] = Field(default_factory=lambda: [0])
    """Exit codes of a probe that ran; any other is a probe error, never a tell."""
    enabled: bool = True


class Battery(BaseModel):
    model_config = ConfigDict(extra="forbid")
    probe: list[Probe] = Field(default_factory=list)

    @property
    def probes(self) -> list[Probe]:
        return [p for p in self.probe if p.enabled]

    def merged(self, other: Battery) -> Battery:
        """This battery with ``other``'s probes replacing same-id ones and adding new ones."""
        by_id = {p.id: p for p in self.probe}
        for probe in other.probe:
            by_id[probe.id] = probe
        return Battery(probe=list(by_id.values()))


def parse_battery(text: str, source: str) -> Battery:
    """The battery in ``text``; ``BatteryError`` naming ``source`` and the field otherwise."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BatteryError(source, f"not valid TOML: {exc}") from None
    try:
        battery = Battery.model_validate(table)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise BatteryError(source, _message(err), _field(table, err["loc"])) from None
    seen: set[str] = set()
    for index, probe in enumerate(battery.probe):
        if probe.id in seen:
            raise BatteryError(source, f"probe id {probe.id!r} is used twice", f"probe[{index}].id")
        seen.add(probe.id)
    return battery


def shipped_battery() -> Battery:
    text = resources.files("envfarm.audit").joinpath("battery.toml").read_text(encoding="utf-8")
    return parse_battery(text, SHIPPED)


def load_battery(extra: list[Path] | None = None) -> Battery:
    """The shipped battery with each file of ``extra`` merged in, in order."""
    battery = shipped_battery()
    for path in extra or []:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise BatteryError(str(path), f"cannot be read: {exc}") from None
        battery = battery.merged(parse_battery(text, str(path)))
    if not battery.probes:
        raise BatteryError(", ".join(map(str, extra or [])) or SHIPPED, "no probe is enabled")
    return battery


def _field(table: object, loc: tuple[int | str, ...]) -> str:
    """``probe[3].rule.pattern`` (with the probe's id when it has one): where the error is."""
    parts: list[str] = []
    node = table
    for key in loc:
        if isinstance(key, int):
            parts[-1] += f"[{key}]"
            if isinstance(node, list) and key < len(node):
                node = node[key]
                probe_id = node.get("id") if isinstance(node, dict) else None
                if isinstance(probe_id, str) and len(parts) == 1:
                    parts[-1] += f" (id {probe_id!r})"
            continue
        if key in ("match", "absent", "compare") and parts and parts[-1] == "rule":
            continue  # the union's branch name, not a field of the file
        parts.append(key)
        node = node.get(key) if isinstance(node, dict) else None
    return ".".join(parts)


def _message(err: object) -> str:
    assert isinstance(err, dict)
    message = str(err.get("msg", "invalid"))
    return message.removeprefix("Value error, ")
