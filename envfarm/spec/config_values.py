"""The value types the tables of ``task.toml`` share, and how they refuse what envfarm cannot do.

Every table is a ``Table``: strict types and no key it does not declare, so envfarm's own code
never reads a key by accident (the keys Harbor would ignore are taken out before validation, by
``spec.tolerated``). Durations are positive ``Seconds``; ``env`` tables are ``EnvVars`` of shell
variable names; a user is a name or a UID (``UserName``, a UID kept as its text). A Harbor value
envfarm cannot honour yet is refused with a message saying so (``NOT_YET``, ``refuse``: an
allowlisted network and its ``allowed_hosts`` here, Windows and GPUs in ``spec.config``) rather
than reported as a plain wrong value.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

NOT_YET = "not supported by envfarm yet"
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _no_allowed_hosts(hosts: list[str]) -> list[str]:
    if hosts:
        raise ValueError(
            f"allowed_hosts needs network_mode 'allowlist', which is {NOT_YET}; remove "
            "allowed_hosts and set network_mode to 'public' or 'no-network'"
        )
    return hosts


def _shell_names(env: dict[str, str]) -> dict[str, str]:
    bad = [key for key in env if not _SHELL_NAME.fullmatch(key)]
    if bad:
        raise ValueError(
            f"invalid variable name(s) {', '.join(map(repr, bad))}: names are letters, digits "
            "and '_', not starting with a digit"
        )
    return env


def _user_name(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"a UID is a non-negative integer, got {value}")
        return str(value)
    if value == "":
        raise ValueError("expected a user name or UID, got an empty string")
    return value


def absolute(path: str | None) -> str | None:
    """An absolute path inside the container (None passes)."""
    if path is not None and not path.startswith("/"):
        raise ValueError(f"must be an absolute path inside the container, got {path!r}")
    return path


def refuse(refused: str, message: str) -> BeforeValidator:
    """A validator for a Harbor value envfarm cannot honour yet (not a plain literal error)."""

    def check(value: Any) -> Any:
        if value == refused:
            raise ValueError(message)
        return value

    return BeforeValidator(check)


NetworkMode = Annotated[
    Literal["no-network", "public"] | None,
    refuse("allowlist", f"network_mode 'allowlist' is {NOT_YET}; use 'public' or 'no-network'"),
]
AllowedHosts = Annotated[list[str], AfterValidator(_no_allowed_hosts)]
EnvVars = Annotated[dict[str, str], AfterValidator(_shell_names)]
Seconds = Annotated[float, Field(gt=0)]
UserName = Annotated[str | None, BeforeValidator(_user_name)]


class Table(BaseModel):
    """A table of ``task.toml``: strict types, no key it does not declare."""

    model_config = ConfigDict(extra="forbid", strict=True)
