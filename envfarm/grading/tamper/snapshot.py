"""Hashing, inside the sandbox, everything that decides what a test run means.

One exec of a bash script (coreutils and findutils only: images may lack python) before the agent
starts and one after it stops. The script prints sections of ``sha256  path`` lines (as
``sha256sum`` does, escapes included):

- ``hidden``: files under ``/tests``, ``/solution`` and ``/logs`` (planted rewards and tests);
- ``interp``: ``python*``/``pytest*`` executables in ``/usr/bin``, ``/usr/local/bin`` and $PATH;
- ``site``: ``sitecustomize.py``, ``usercustomize.py`` and ``*.pth`` of every site directory,
  and ``/etc/ld.so.preload``; ``runner``: the files of the installed ``pytest``, ``_pytest``
  and ``pluggy``; ``plugins``: ``entry_points.txt`` files that register a ``pytest11`` plugin.
  ``interp`` and ``runner`` record size, ctime and inode (``S``) instead of a content hash: the
  interpreter is megabytes, and no one can set a ctime back, so any write still shows;
- ``outside``: ``conftest.py``, pytest configuration files, ``pytest.py`` and
  ``sitecustomize.py`` in the workdir's ancestors (pytest finds them there too);
- ``testcfg``: the pytest part of every ``pytest.ini``, ``tox.ini``, ``setup.cfg`` and
  ``pyproject.toml`` in and above the workdir (``awk`` keeps the pytest sections, so editing
  a project's dependencies is not a test-configuration change);
- ``workspace`` (last, so that an oversized listing cannot hide the rest): every file under the
  workdir but VCS, cache, virtualenv and ``node_modules`` trees; files of 8 MiB and more by
  size and mtime, symlinks by the hash of their target (``L``).

The second pass is incremental in the workspace: a file whose ctime is not past the first
pass's start (less a margin for the kernel's coarse file clock; no one can set a ctime back) is
only named, and keeps the digest the first pass found; only the others are hashed again. When
the clean room's capture walks the file system anyway, the second pass skips the workspace and
the host derives it from that walk (``derived.py``).

Site directories come from the interpreter itself before the agent (``python3 -I -S``), merged
with a fixed list of globs; after the agent, the same list is re-used and the globs re-expanded,
so the agent's interpreter is never trusted to say where to look.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import SandboxError
from envfarm.sandbox.base import Sandbox

MAX_WORKSPACE_FILES = 20_000
SNAPSHOT_TIMEOUT_S = 180.0
WORKSPACE_PRUNED = (
    *(".git", ".hg", ".svn", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache"),
    *(".ruff_cache", ".tox", ".venv", "venv"),
)
"""The trees the workspace section leaves out (by name, anywhere under the workdir)."""
LARGE_FILE_BYTES = 8 * 1024 * 1024
"""Files of this size and more are known by size and mtime, not by a content hash."""

_SCRIPT = r"""
set +e
export LC_ALL=C
W="${EF_WORKDIR:-$PWD}"
[ -n "$EF_FIXED" ] || W="$(cd "$W" 2>/dev/null && pwd -P || printf '%s' "$W")"
MAX="${EF_MAX:-20000}"
PRUNE=( \( @PRUNE@ \) -prune )
hash0() { xargs -0 -r sha256sum -- 2>/dev/null; }
stat0() { xargs -0 -r stat -L -c 'S %s:%Z:%i  %n' -- 2>/dev/null; }
links0() {
  xargs -0 -r bash -c \
    'for p; do printf "L %s  %s\n" "$(readlink -- "$p" | sha256sum | cut -c1-64)" "$p"; done' _
}
dirs=(); d="$W"
while [ "$d" != / ] && [ -n "$d" ]; do d="$(dirname "$d")"; dirs+=("$d"); done
[ "$W" = / ] && dirs=(/)
echo "@@ meta"
printf 'now %s\n' "$(date +%s.%N 2>/dev/null)"
printf 'workdir %s\n' "$W"
for t in sha256sum find xargs awk; do command -v "$t" >/dev/null 2>&1 || echo "missing $t"; done
printf 'x\0' | head -z -n 1 >/dev/null 2>&1 || echo "missing head-z"
echo "@@ hidden"
find /tests /solution /logs -type f -print0 2>/dev/null | head -z -n 2000 | hash0
find /tests /solution /logs -type l -print0 2>/dev/null | head -z -n 2000 | links0
echo "@@ interp"
IFS=: read -r -a pdirs <<< "$PATH"
for d in /usr/bin /usr/local/bin "${pdirs[@]}"; do
  for f in "$d"/python* "$d"/pytest* "$d"/py.test; do [ -f "$f" ] && printf '%s\0' "$f"; done
done | sort -zu | stat0
sites="$EF_SITES"
if [ -z "$sites" ]; then
  for py in python3 python; do
    command -v "$py" >/dev/null 2>&1 && "$py" -I -S -c 'import site, sysconfig
print("\n".join(site.getsitepackages() + [site.getusersitepackages(),
      sysconfig.get_paths()["stdlib"]]))' 2>/dev/null
  done > /tmp/.envfarm-sites
  sites="$(cat /tmp/.envfarm-sites)"; rm -f /tmp/.envfarm-sites
fi
globbed="$(for d in /usr/lib/python3* /usr/lib/python3*/*-packages /usr/local/lib/python3* \
  /usr/local/lib/python3*/*-packages /etc/python3* /opt/*/lib/python3*/site-packages \
  /opt/*/*/lib/python3*/site-packages /root/.local/lib/python3*/site-packages \
  /home/*/.local/lib/python3*/site-packages "$W"/.venv/lib/python3*/site-packages \
  "$W"/venv/lib/python3*/site-packages; do [ -d "$d" ] && printf '%s\n' "$d"; done)"
sites="$(printf '%s\n%s\n' "$sites" "$globbed" | grep -v '^$' | sort -u)"
echo "@@ sites"
printf '%s\n' "$sites"
echo "@@ site"
printf '%s\n' "$sites" | while IFS= read -r d; do
  [ -d "$d" ] && find "$d" -maxdepth 1 \( -name sitecustomize.py -o -name usercustomize.py \
    -o -name '*.pth' \) \( -type f -o -type l \) -print0
done | hash0
[ -f /etc/ld.so.preload ] && sha256sum /etc/ld.so.preload
echo "@@ runner"
printf '%s\n' "$sites" | while IFS= read -r d; do
  [ -d "$d" ] && find "$d" -maxdepth 1 \( -name _pytest -o -name pytest -o -name pluggy \
    -o -name pytest.py -o -name py.py \) -print0
done | while IFS= read -r -d '' p; do find "$p" -type f -print0; done | stat0
echo "@@ plugins"
printf '%s\n' "$sites" | while IFS= read -r d; do
  [ -d "$d" ] && grep -l -s -F pytest11 "$d"/*.dist-info/entry_points.txt \
    "$d"/*.egg-info/entry_points.txt
done | tr '\n' '\0' | hash0
echo "@@ outside"
for d in "${dirs[@]}"; do
  for f in conftest.py pytest.ini .pytest.ini tox.ini setup.cfg pyproject.toml pytest.py \
    sitecustomize.py usercustomize.py; do
    [ -f "$d/$f" ] && printf '%s\0' "${d%/}/$f"
  done
done | hash0
echo "@@ testcfg"
{
  [ "$W" != / ] && find -H "$W" "${PRUNE[@]}" -o -type f \( -name pytest.ini -o -name .pytest.ini \
    -o -name tox.ini -o -name setup.cfg -o -name pyproject.toml \) -print0 2>/dev/null
  for d in "${dirs[@]}"; do
    for f in pytest.ini .pytest.ini tox.ini setup.cfg pyproject.toml; do
      [ -f "$d/$f" ] && printf '%s\0' "${d%/}/$f"
    done
  done
} | while IFS= read -r -d '' f; do
  case "${f##*/}" in
    pytest.ini|.pytest.ini) s="$(sha256sum < "$f" | cut -c1-64)" ;;
    *) s="$(awk '/^[ \t]*\[/ { s = ($0 ~ /^[ \t]*\[[ \t]*(tool[.:]pytest|pytest)[ \t]*[].]/) } s' \
         "$f" 2>/dev/null | sha256sum | cut -c1-64)" ;;
  esac
  printf '%s  %s\n' "$s" "$f"
done
echo "@@ workspace"
if [ "$W" != / ] && [ -d "$W" ] && [ -n "$EF_DERIVED" ]; then
  echo derived  # the host takes it from the clean room's capture (derived.py)
elif [ "$W" != / ] && [ -d "$W" ]; then
  NEW=()
  if [ -n "$EF_SINCE" ]; then  # after the agent: hash only what changed since the first pass
    NEW=( -newerct "@$EF_SINCE" )
    find -H "$W" "${PRUNE[@]}" -o -type f -size -@LARGE@c ! -newerct "@$EF_SINCE" \
      -printf 'U -  %p\n' 2>/dev/null | head -n "$MAX"
  fi
  find -H "$W" "${PRUNE[@]}" -o -type f -size -@LARGE@c "${NEW[@]}" -print0 2>/dev/null \
    | head -z -n "$MAX" | hash0
  find -H "$W" "${PRUNE[@]}" -o -type f -size +@LARGE_1@c -print0 2>/dev/null | head -z -n "$MAX" \
    | xargs -0 -r stat -c 'B %s:%Y  %n' -- 2>/dev/null
  find -H "$W" "${PRUNE[@]}" -o -type l -print0 2>/dev/null | head -z -n "$MAX" | links0
else
  echo "skipped"
fi
exit 0
"""
SNAPSHOT_SCRIPT = (
    _SCRIPT.replace("@PRUNE@", " -o ".join(f"-name {name}" for name in WORKSPACE_PRUNED))
    .replace("@LARGE_1@", str(LARGE_FILE_BYTES - 1))
    .replace("@LARGE@", str(LARGE_FILE_BYTES))
)

SOLUTION_SCRIPT = r"""
export LC_ALL=C
printf 'now %s\n' "$(date +%s.%N 2>/dev/null)"
echo "@@ hidden"
find /solution -type f -print0 2>/dev/null | head -z -n 2000 | xargs -0 -r sha256sum -- 2>/dev/null
find /solution -type l -print0 2>/dev/null | head -z -n 2000 | xargs -0 -r bash -c \
  'for p; do printf "L %s  %s\n" "$(readlink -- "$p" | sha256sum | cut -c1-64)" "$p"; done' _
"""
"""The container's clock and the ``hidden`` section's lines for ``/solution`` alone, as
``SNAPSHOT_SCRIPT`` prints them."""
MAX_HIDDEN = 2000

_HASHED = re.compile(r"^(\\?)([0-9a-f]{64})  (.*)$")
_OTHER = re.compile(r"^([LBSU]) (\S+)  (.*)$")
UNCHANGED = "U:-"
CTIME_MARGIN_S = 2.0


class Snapshot(BaseModel):
    """Section -> path -> digest (``L:``/``B:`` prefixes for symlinks and large files)."""

    model_config = ConfigDict(extra="forbid")

    workdir: str
    now: float | None = None
    """The container's clock when the snapshot began."""
    sections: dict[str, dict[str, str]] = Field(default_factory=dict)
    sites: list[str] = Field(default_factory=list)
    missing_tools: list[str] = Field(default_factory=list)
    workspace_skipped: bool = False
    workspace_truncated: bool = False
    workspace_derived: bool = False
    """The script left the workspace to the host (``derived.py``): the section is still empty."""

    def section(self, name: str) -> dict[str, str]:
        return self.sections.get(name, {})


def _unescape(path: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), path)


def parse_snapshot(text: str) -> Snapshot:
    snapshot = Snapshot(workdir="")
    section = ""
    for line in text.splitlines():
        if line.startswith("@@ "):
            section = line[3:].strip()
            snapshot.sections.setdefault(section, {})
            continue
        if section == "meta":
            key, _, value = line.partition(" ")
            if key == "workdir":
                snapshot.workdir = value
            elif key == "now":
                try:
                    snapshot.now = float(value)
                except ValueError:
                    snapshot.now = None
            elif key == "missing":
                snapshot.missing_tools.append(value)
        elif section == "sites":
            if line.strip():
                snapshot.sites.append(line)
        elif section == "workspace" and line == "skipped":
            snapshot.workspace_skipped = True
        elif section == "workspace" and line == "derived":
            snapshot.workspace_derived = True
        elif hashed := _HASHED.match(line):
            escaped, digest, path = hashed.groups()
            snapshot.sections[section][_unescape(path) if escaped else path] = digest
        elif other := _OTHER.match(line):
            kind, digest, path = other.groups()
            snapshot.sections[section][path] = f"{kind}:{digest}"
    snapshot.workspace_truncated = len(snapshot.section("workspace")) >= MAX_WORKSPACE_FILES
    return snapshot


async def solution_state(sandbox: Sandbox) -> tuple[float, dict[str, str]] | None:
    """The container's clock and what the first snapshot would show under ``/solution``
    (None when the clock cannot be read)."""
    result = await sandbox.exec(SOLUTION_SCRIPT, timeout=SNAPSHOT_TIMEOUT_S, user="root")
    if result.timed_out:
        return None
    shown = parse_snapshot("@@ meta\n" + result.stdout)
    if shown.now is None:
        return None
    return shown.now, shown.section("hidden")


async def take_snapshot(
    sandbox: Sandbox,
    workdir: str | None,
    before: Snapshot | None = None,
    *,
    derive_workspace: bool = False,
) -> Snapshot:
    """Run the snapshot script as root. After the agent, pass the ``before`` snapshot: its
    resolved workdir and site directories are re-used as they were. ``derive_workspace``:
    leave the workspace section to the host (``workspace_derived``), which takes it from the
    clean room's capture."""
    env = {"EF_WORKDIR": workdir or "", "EF_MAX": str(MAX_WORKSPACE_FILES)}
    if derive_workspace:
        env["EF_DERIVED"] = "1"
    if before is not None:
        env |= {"EF_WORKDIR": before.workdir, "EF_FIXED": "1", "EF_SITES": "\n".join(before.sites)}
        if before.now is not None:
            env["EF_SINCE"] = f"{before.now - CTIME_MARGIN_S:.6f}"
    result = await sandbox.exec(SNAPSHOT_SCRIPT, timeout=SNAPSHOT_TIMEOUT_S, env=env, user="root")
    if result.timed_out:
        raise SandboxError(f"the tamper snapshot timed out after {SNAPSHOT_TIMEOUT_S:g}s")
    snapshot = parse_snapshot(result.stdout)
    if before is not None:
        earlier = before.section("workspace")
        workspace = snapshot.section("workspace")
        for path, digest in workspace.items():
            if digest == UNCHANGED:
                workspace[path] = earlier.get(path, UNCHANGED)
    return snapshot
