"""The alias table (``images/aliases.toml``), which drives the Dockerfile ``FROM`` rewriting of
``task_image.py``.

The table maps public base names to local recipes: the offline substitutes used when a base is
neither a local image nor pullable (the order is ``sources.py``'s). Names are normalised
first (a Docker Hub mirror prefix such as ``docker.io/library/`` or
``public.ecr.aws/docker/library/`` dropped, ``:latest`` added, a ``@sha256:`` digest stripped
with a warning because no local image can honour it), then matched against exact names, then
against the table's regular expressions in file order. An alias that ``requires`` environment
variables applies only where they are set (else the next alias that matches does): a recipe
whose source the host must name, such as ``ENVFARM_UBUNTU_ARCHIVE`` for the Python 3.12 taken
from Ubuntu 24.04's archive. A recipe's ``args`` may use ``${VAR}`` (``recipe_args``).

Users extend the table without editing envfarm: every file named by ``ENVFARM_ALIASES``
(``os.pathsep``-separated) and ``$XDG_CONFIG_HOME/envfarm/aliases.toml`` is read after the
packaged one; its recipes are added (a ``dockerfile`` relative to that file), its aliases are
tried before the packaged ones (a name it maps is taken out of the packaged entries) and its
``mirror_prefixes`` are added. Everything here is pure: the docker side decides which
references exist locally (``docker/images.py``) and builds the recipes
(``docker/images/recipes.py``).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from envfarm.errors import ImageError, UnknownBaseImage
from envfarm.settings import ALIASES_ENV, Settings

DOCS = "docs/images.md"
USER_TABLES_ENV = ALIASES_ENV


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str
    dockerfile: str | None = None
    """Path under images/ (absolute for a user's table); None for a root recipe, a
    debootstrapped Debian rootfs of ``suite``."""
    parent: str | None = None
    suite: str | None = None
    """Root recipes only: the Debian release (``bookworm``, ``trixie``)."""
    args: dict[str, str] = {}
    """Build args; ``${VAR}`` is the environment's value (``recipe_args``)."""


class Alias(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str
    names: list[str] = []
    patterns: list[str] = []
    warning: str | None = None
    requires: list[str] = []
    """Environment variables that must be set (non-empty) for this alias to apply."""

    def applies(self, env: Mapping[str, str] | None = None) -> bool:
        env = os.environ if env is None else env
        return all(env.get(name) for name in self.requires)


class AliasTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mirror_prefixes: list[str] = []
    """Prefixes naming Docker Hub's official images through a mirror (``docker.io/library/``),
    dropped by the normaliser; longest first when matching."""
    recipes: dict[str, Recipe]
    aliases: list[Alias] = []

    @model_validator(mode="after")
    def _consistent(self) -> AliasTable:
        if "base" not in self.recipes:
            raise ValueError("recipes.base is required")
        for name, recipe in self.recipes.items():
            root = recipe.dockerfile is None and recipe.parent is None
            if root and recipe.suite is None:
                raise ValueError(f"recipes.{name}: a root recipe needs a suite")
            if not root and (recipe.dockerfile is None or recipe.parent is None):
                raise ValueError(f"recipes.{name} needs both dockerfile and parent")
            if not root and recipe.suite is not None:
                raise ValueError(f"recipes.{name}: only a root recipe has a suite")
            if recipe.parent is not None and recipe.parent not in self.recipes:
                raise ValueError(f"recipes.{name}.parent: unknown recipe {recipe.parent!r}")
        seen: set[str] = set()
        for alias in self.aliases:
            if alias.recipe not in self.recipes:
                raise ValueError(f"alias {alias.names or alias.patterns}: unknown recipe")
            for name in alias.names:
                if normalize_reference(name, self.mirror_prefixes)[0] != name or name in seen:
                    raise ValueError(f"alias name {name!r} is duplicated or not normalised")
                if not alias.requires:  # a conditional alias falls back to a later one
                    seen.add(name)
            for pattern in alias.patterns:
                re.compile(pattern)
        return self

    def suite_of(self, recipe: str) -> str:
        """The Debian release a recipe's image is built on (its root's suite)."""
        spec = self.recipes[recipe]
        while spec.parent is not None:
            spec = self.recipes[spec.parent]
        assert spec.suite is not None
        return spec.suite

    def root_of(self, recipe: str) -> str:
        while (parent := self.recipes[recipe].parent) is not None:
            recipe = parent
        return recipe


class AliasMatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str
    """As written in the Dockerfile or task.toml."""
    name: str
    """Normalised."""
    recipe: str
    warnings: list[str] = []


def images_dir() -> Path:
    """The recipe directory: package data when installed, the repo's images/ otherwise."""
    try:
        return Path(str(resources.files("envfarm.images")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[3] / "images"


def user_alias_tables(env: dict[str, str] | None = None) -> list[Path]:
    """The user's own tables, in the order they are read (later ones win)."""
    env = dict(os.environ) if env is None else env
    config_home = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    paths = [config_home / "envfarm" / "aliases.toml"]
    paths += Settings.from_env(env).alias_tables
    return [path for path in paths if path.is_file()]


def load_alias_table(path: Path | None = None) -> AliasTable:
    """The packaged table (or ``path``) with the user's tables merged onto it."""
    if path is not None:
        return _load(path, ())
    return _load(images_dir() / "aliases.toml", tuple(user_alias_tables()))


def _read_table(path: Path) -> dict[str, object]:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ImageError(f"{path}: invalid alias table: {exc}") from exc


@cache
def _load(path: Path, extra: tuple[Path, ...]) -> AliasTable:
    data = _read_table(path)
    for user_path in extra:
        user = _read_table(user_path)
        recipes = dict(user.get("recipes") or {})  # type: ignore[call-overload]
        for spec in recipes.values():
            if isinstance(spec, dict) and isinstance(spec.get("dockerfile"), str):
                spec["dockerfile"] = str((user_path.parent / spec["dockerfile"]).resolve())
        data["recipes"] = {**data["recipes"], **recipes}  # type: ignore[dict-item]
        aliases = list(user.get("aliases") or [])  # type: ignore[call-overload]
        overridden = {n for a in aliases if isinstance(a, dict) for n in a.get("names", [])}
        for alias in data["aliases"]:  # type: ignore[attr-defined]
            alias["names"] = [n for n in alias.get("names", []) if n not in overridden]
        data["aliases"] = [*aliases, *data["aliases"]]  # type: ignore[misc]
        prefixes = [*data.get("mirror_prefixes", []), *user.get("mirror_prefixes", [])]  # type: ignore[misc]
        data["mirror_prefixes"] = prefixes
    try:
        return AliasTable.model_validate(data)
    except ValidationError as exc:
        where = ", ".join(str(p) for p in (path, *extra))
        raise ImageError(f"{where}: invalid alias table: {exc}") from exc


def normalize_reference(
    reference: str, mirror_prefixes: list[str] | None = None
) -> tuple[str, list[str]]:
    """``docker.io/library/python:3.11-slim@sha256:..`` -> ``python:3.11-slim`` + warnings.

    ``mirror_prefixes``: the table's (default: the loaded table's)."""
    if mirror_prefixes is None:
        mirror_prefixes = load_alias_table().mirror_prefixes
    name, warnings = reference.strip(), []
    if "@" in name:
        name, digest = name.split("@", 1)
        if pinned_by_digest(reference):
            warnings.append(
                f"{reference}: pinned by digest, which no offline substitute can honour; "
                "a local image for the name is used"
            )
        else:
            warnings.append(
                f"{reference}: digest {digest} cannot be verified without a registry; "
                "it is ignored and the local image for the name is used"
            )
    for prefix in sorted(mirror_prefixes, key=len, reverse=True):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if ":" not in name.rsplit("/", 1)[-1]:
        name += ":latest"
    return name, warnings


def pinned_by_digest(reference: str) -> bool:
    """``python@sha256:...``: a digest and no tag, so no tag's warning applies."""
    name, at, _ = reference.strip().partition("@")
    return bool(at) and ":" not in name.rsplit("/", 1)[-1]


def registry_of(reference: str) -> str:
    """The registry host a reference pulls from (``docker.io`` for a bare name)."""
    first, _, rest = reference.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def match_alias(reference: str, table: AliasTable | None = None) -> AliasMatch | None:
    """The alias for ``reference``, or None when the table has none."""
    table = table or load_alias_table()
    name, warnings = normalize_reference(reference, table.mirror_prefixes)
    aliases = [alias for alias in table.aliases if alias.applies()]
    found = next((a for a in aliases if name in a.names), None)
    if found is None:
        found = next((a for a in aliases if any(re.fullmatch(p, name) for p in a.patterns)), None)
    if found is None:
        return None
    if pinned_by_digest(reference):
        warnings[-1] = (
            f"{reference}: pinned by digest, which no offline substitute can honour; envfarm "
            f"supplies recipe {found.recipe} instead ({table.recipes[found.recipe].description})"
        )
    elif found.warning:
        warnings.append(found.warning.format(name=reference))
    return AliasMatch(reference=reference, name=name, recipe=found.recipe, warnings=warnings)


def recipe_args(recipe: Recipe, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The recipe's build args, ``${VAR}`` replaced by the environment's value ("" if unset)."""
    env = os.environ if env is None else env
    return {
        key: re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), value)
        for key, value in recipe.args.items()
    }


def alias_table_markdown(table: AliasTable | None = None) -> str:
    """The alias table as the Markdown table of docs/images.md (a test keeps them in sync)."""
    table = table or load_alias_table()
    rows = ["| Base in a Dockerfile | Local recipe | Note |", "|---|---|---|"]
    for alias in table.aliases:
        entries = [f"`{name}`" for name in alias.names]
        entries += [f"pattern `{pattern}`" for pattern in alias.patterns]
        for entry in entries:
            note = (alias.warning or "").removeprefix("{name}: ").replace("|", "\\|")
            if alias.requires:
                note = f"where {', '.join(alias.requires)} is set: {note}"
            rows.append(f"| {entry} | {alias.recipe} | {note} |")
    return "\n".join(rows) + "\n"


def unknown_base(
    reference: str,
    where: str,
    table: AliasTable | None = None,
    tried: list[str] | None = None,
) -> UnknownBaseImage:
    """``tried``: what each source said (``pull: registry ... did not answer``)."""
    table = table or load_alias_table()
    known = sorted({name for alias in table.aliases for name in alias.names})
    said = "".join(f"\n  {line}" for line in tried or [])
    return UnknownBaseImage(
        f"{where}: base image {reference!r} is neither a local image nor pullable nor a known "
        f"alias.{said}\nKnown aliases: {', '.join(known)}. Add an alias or a substitute to "
        f"images/aliases.toml or a table of your own (see {DOCS}, 'Adding a substitute'), "
        f"or build, pull or load {reference!r} first."
    )
