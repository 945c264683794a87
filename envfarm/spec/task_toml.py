"""Reading a task's ``task.toml``: its text as TOML, then its tables as Harbor's parser reads them.

``read_toml`` turns the file into data (a TOML error names its line and column);
``read_task_config`` validates that data into the models of ``spec.config``. Order: refuse the
Harbor features envfarm cannot honour yet (unless their value is empty), translate Harbor's
deprecated fields (root ``version`` -> ``schema_version``, where ``schema_version`` wins as in
Harbor; ``allow_internet``, ``memory``, ``storage``), take what no model declares out into the
``unknown`` record (``spec.tolerated``), warn about a schema string envfarm does not know, then
validate. Every refusal of a file comes in one ``TaskSpecError``.
"""

from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envfarm.spec.config import SUPPORTED_SCHEMA_VERSIONS, TaskConfig
from envfarm.spec.config_values import NOT_YET
from envfarm.spec.errors_fmt import Issue, issues_from_validation, spec_error, toml_type
from envfarm.spec.tolerated import take_misread, take_unknown, unknown_message

_UNSUPPORTED_KEYS: dict[tuple[str, ...], str] = {
    ("environment", "gpu_types"): f"GPUs are {NOT_YET}; remove it",
    ("environment", "tpu"): f"TPUs are {NOT_YET}; remove it",
}
_STEP_IMAGE = (
    f"a step's verifier image of its own is {NOT_YET}; give the task one ([verifier.environment])"
)
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT])(?:I?B)?", re.IGNORECASE)
_MB_PER_UNIT = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


def read_toml(path: Path) -> tuple[dict[str, Any] | None, list[Issue]]:
    """The TOML data of ``path``, or None and the reason it cannot be read."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), []
    except tomllib.TOMLDecodeError as exc:
        text = str(exc)
        found = _TOML_POSITION.search(text)
        if found is not None:
            where = f"at line {found.group(1)}, column {found.group(2)}"
            text = f"{where}: {_TOML_POSITION.sub('', text)}"
        return None, [Issue(str(path), None, f"invalid TOML {text}")]
    except UnicodeDecodeError as exc:
        return None, [Issue(str(path), None, f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
    except OSError as exc:
        return None, [Issue(str(path), None, f"cannot read: {exc.strerror or exc}")]


@dataclass
class _Compat:
    data: dict[str, Any]
    issues: list[tuple[str, str]] = field(default_factory=list)
    translated: dict[str, str] = field(default_factory=dict)
    """New field -> the deprecated assignment it came from, quoted in later errors."""

    warnings: list[tuple[str, str]] = field(default_factory=list)

    def refuse(self, where: str, message: str) -> None:
        self.issues.append((where, message))

    def warn(self, where: str, message: str) -> None:
        self.warnings.append((where, message))


def _size_mb(value: Any) -> int | None:
    match = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        return None
    return int(float(match.group(1)) * _MB_PER_UNIT[match.group(2).upper()])


def _translate_size(env: dict[str, Any], old: str, new: str, out: _Compat) -> None:
    value = env.pop(old)
    mb = _size_mb(value)
    if mb is None:
        shown = f"{toml_type(value)} {value!r}"
        out.refuse(f"environment.{old}", f"expected a size like '2G' or '512M', got {shown}")
    elif env.setdefault(new, mb) != mb:
        out.refuse(
            f"environment.{old}",
            f"deprecated {old} = {value!r} ({mb} MB) contradicts {new} = {env[new]!r}; "
            f"keep only {new}",
        )
    else:
        out.translated[f"environment.{new}"] = f"environment.{old} = {value!r}"


def _translate_allow_internet(env: dict[str, Any], out: _Compat) -> None:
    value = env.pop("allow_internet")
    if not isinstance(value, bool):
        shown = f"{toml_type(value)} {value!r}"
        out.refuse("environment.allow_internet", f"expected true or false, got {shown}")
        return
    mode = "public" if value else "no-network"
    if env.setdefault("network_mode", mode) != mode:
        out.refuse(
            "environment.allow_internet",
            f"deprecated allow_internet = {str(value).lower()} contradicts network_mode = "
            f"{env['network_mode']!r}; keep only network_mode",
        )


def _harbor_compat(raw: dict[str, Any]) -> _Compat:
    """Translate deprecated Harbor fields; refuse unsupported ones unless their value is empty."""
    out = _Compat(copy.deepcopy(raw))
    for loc, advice in _UNSUPPORTED_KEYS.items():
        table: Any = out.data
        for part in loc[:-1]:
            table = table.get(part) if isinstance(table, dict) else None
        if isinstance(table, dict) and table.pop(loc[-1], []) not in ([], {}, ""):
            out.refuse(".".join(loc), advice)
    if out.data.get("steps") == []:
        del out.data["steps"]
    for index, step in enumerate(out.data.get("steps") or []):
        verifier = step.get("verifier") if isinstance(step, dict) else None
        if isinstance(verifier, dict) and verifier.pop("environment", {}) not in ({}, None):
            out.refuse(f"steps[{index}].verifier.environment", _STEP_IMAGE)
    if "version" in out.data:
        version = out.data.pop("version")
        kept = out.data.setdefault("schema_version", version)
        if kept != version:
            out.warn(
                "version",
                f"old name of schema_version; ignored, as in Harbor: schema_version = {kept!r} "
                f"wins over version = {version!r}",
            )
        else:
            out.translated["schema_version"] = f"version = {version!r}"
    verifier = out.data.get("verifier")
    if isinstance(verifier, dict) and isinstance(verifier.get("environment"), dict):
        _verifier_environment(verifier, out)
    env = out.data.get("environment")
    if isinstance(env, dict):
        if "allow_internet" in env:
            _translate_allow_internet(env, out)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old in env:
                _translate_size(env, old, new, out)
    return out


def _verifier_environment(verifier: dict[str, Any], out: _Compat) -> None:
    """``[verifier.environment]`` as Harbor reads it: it implies ``environment_mode =
    "separate"`` (any other mode contradicts it), and its network is the verifier's."""
    own = verifier["environment"]
    mode = verifier.setdefault("environment_mode", "separate")
    if mode != "separate":
        out.refuse(
            "verifier.environment",
            f'a verifier image of its own runs in environment_mode = "separate", not {mode!r}',
        )
    if "allow_internet" in own:
        _translate_allow_internet(own, out)
    network = own.pop("network_mode", None)
    if network is not None and verifier.setdefault("network_mode", network) != network:
        out.refuse(
            "verifier.environment.network_mode",
            f"{network!r} contradicts verifier.network_mode = {verifier['network_mode']!r}",
        )
    for key in ("os", "gpus", "gpu_types", "tpu", "allowed_hosts", "mcp_servers", "skills_dir"):
        if own.pop(key, None) not in (None, [], {}, "", 0, "linux"):
            out.refuse(f"verifier.environment.{key}", f"a verifier image's {key} is {NOT_YET}")
    for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
        if old in own:
            _translate_size(own, old, new, out)


@dataclass(frozen=True)
class ParsedConfig:
    """A task.toml as read: the validated config, what was ignored, and the warnings."""

    config: TaskConfig
    unknown: dict[str, Any]
    """Keys no model declares (dotted key -> value), taken out before validation."""
    warnings: list[Issue]


def read_task_config(data: dict[str, Any], path: str) -> ParsedConfig:
    """Validate the parsed TOML of ``path`` as Harbor reads it; raise one TaskSpecError listing
    every problem that would change what the task means."""
    compat = _harbor_compat(data)
    issues = [Issue(path, where, message) for where, message in compat.issues]
    warnings = [Issue(path, where, message) for where, message in compat.warnings]
    unknown = take_misread(compat.data) | take_unknown(compat.data, TaskConfig)
    warnings += [Issue(path, key, unknown_message(key, TaskConfig)) for key in unknown]
    version = compat.data.get("schema_version")
    if isinstance(version, str) and version not in SUPPORTED_SCHEMA_VERSIONS:
        warnings.append(
            Issue(
                path,
                "schema_version",
                f"{version!r} is not a schema envfarm knows "
                f"({', '.join(SUPPORTED_SCHEMA_VERSIONS)}); read as 1.4",
            )
        )
    config = None
    try:
        config = TaskConfig.model_validate(compat.data)
    except ValidationError as exc:
        for issue in issues_from_validation(exc, path, TaskConfig):
            origin = compat.translated.get(issue.field or "")
            message = f"{issue.message} (from {origin})" if origin else issue.message
            issues.append(Issue(issue.path, issue.field, message))
    if issues or config is None:
        raise spec_error(issues)
    return ParsedConfig(config=config, unknown=unknown, warnings=warnings)


def parse_task_config(data: dict[str, Any], path: str) -> TaskConfig:
    """``read_task_config`` without the record of what was ignored."""
    return read_task_config(data, path).config
