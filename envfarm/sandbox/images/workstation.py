"""The workstation profile's image layer: a developer's tools, user and home on the task's image.

Built FROM whatever image the task uses, as the agent layer is (``agent_layer.py``), and cached
under a key of that image, this script and the workdir, so the substitute images stay as they
are and a second episode reuses it. As root, ``SCRIPT``:

- installs the usual developer tools with the image's package manager (apt or apk): make, gcc,
  an editor, less, man, file, unzip, an ssh client, wget, curl, git, procps; an image with
  neither gets none (the profile cannot add them there);
- generates the session's ``LOCALE`` and sets the machine's time zone to ``TIMEZONE`` where the
  image kept UTC (an image that chose a zone keeps it): a laptop's, not a server's. Everything
  in the sandbox sees them, the verifier too, as on the developer's machine they imitate;
- creates the developer ``USER`` (the first free uid from 1000) with a home: the skeleton's
  dotfiles, a git identity, a plausible shell history, a projects folder;
- gives the task's workdir to that user when it is a directory of its own (not ``/`` or a
  system directory): most tasks' files assume root, and an agent that cannot write its own
  working tree would fail for reasons that have nothing to do with the model;
- lets git work in repositories of another owner (``safe.directory``), since the verifier runs
  as root in the user's tree;
- writes an ``/etc/machine-id`` where the image has none, as a first boot does;
- dates what the image's installation and the layer wrote (in ``/etc``, the package manager's
  state, ``/var/log`` and the home) ``INSTALLED_DAYS_AGO``, as on a machine installed months
  ago; the task's own files keep their dates.

``sudo`` is not installed: the helper serves it (``images/sandboxd/sudo.c``), no setuid binary.
"""

from __future__ import annotations

import hashlib
import shlex
from abc import ABC, abstractmethod

from envfarm.errors import EnvironmentUnsupported
from envfarm.sandbox.base import PreparedImage, SandboxBackend
from envfarm.settings import WORKSTATION_USER

USER = WORKSTATION_USER
LOCALE = "en_US.UTF-8"
TIMEZONE = "America/Los_Angeles"
INSTALLED_DAYS_AGO = 137
"""How long ago the system files and the home look written: installed months ago, not today."""
FULL_NAME = "Alex Morgan"
EMAIL = "alex@alexmorgan.dev"
SYSTEM_DIRS = frozenset(
    {"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "root", "run",
     "sbin", "srv", "sys", "tmp", "usr", "var"}
)  # fmt: skip

SCRIPT = r"""#!/bin/sh
set -e
U="$1"; WORKDIR="$2"; NAME="$3"; EMAIL="$4"; LOC="$5"; ZONE="$6"; H="/home/$U"
export DEBIAN_FRONTEND=noninteractive
if command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends make gcc libc6-dev vim-tiny nano less \
    man-db file unzip openssh-client wget curl git ca-certificates procps iproute2 locales \
    tzdata >/dev/null
  rm -rf /var/lib/apt/lists/*
  sed -i "s/^# *\($LOC .*\)$/\1/" /etc/locale.gen
  grep -q "^$LOC " /etc/locale.gen || echo "$LOC UTF-8" >> /etc/locale.gen
  locale-gen >/dev/null
  echo "LANG=$LOC" > /etc/default/locale
  if [ ! -e /usr/bin/vim ] && [ -x /usr/bin/vim.tiny ]; then ln -s vim.tiny /usr/bin/vim; fi
elif command -v apk >/dev/null 2>&1; then
  apk add --no-cache bash make gcc musl-dev vim nano less mandoc file unzip openssh-client \
    wget curl git procps tzdata >/dev/null
fi
zone=$(readlink /etc/localtime 2>/dev/null || true)
case "$zone" in
  ""|*/UTC|*/Etc/UTC|*/UCT|*/Universal|*/Zulu|*/GMT|*/Etc/GMT)
    if [ -f "/usr/share/zoneinfo/$ZONE" ]; then
      ln -sf "/usr/share/zoneinfo/$ZONE" /etc/localtime
      echo "$ZONE" > /etc/timezone
    fi ;;
esac
if ! grep -q "^$U:" /etc/passwd; then
  uid=1000
  while cut -d: -f3 /etc/passwd | grep -qx "$uid" || cut -d: -f3 /etc/group | grep -qx "$uid"; do
    uid=$((uid + 1))
  done
  echo "$U:x:$uid:" >> /etc/group
  echo "$U:x:$uid:$uid:$NAME,,,:$H:/bin/bash" >> /etc/passwd
  if [ -f /etc/shadow ]; then echo "$U:*:19900:0:99999:7:::" >> /etc/shadow; fi
  for g in sudo wheel adm; do
    if grep -q "^$g:" /etc/group; then
      sed -i "s/^\($g:[^:]*:[^:]*:\)\(.*\)$/\1\2,$U/; s/:,$U$/:$U/" /etc/group
    fi
  done
fi
mkdir -p "$H/projects" "$H/.config" "$H/.cache" "$H/.ssh" "$H/.local/bin"
if [ -d /etc/skel ]; then cp -a /etc/skel/. "$H/"; fi
[ -f "$H/.bashrc" ] || printf '%s\n' '[ -z "$PS1" ] && return' 'HISTCONTROL=ignoreboth' \
  'shopt -s histappend' 'HISTSIZE=1000' 'HISTFILESIZE=2000' > "$H/.bashrc"
cat >> "$H/.bashrc" <<'EOF'
alias ll='ls -alF'
alias la='ls -A'
alias gs='git status'
export EDITOR=vim
export PATH="$HOME/.local/bin:$PATH"
EOF
[ -f "$H/.profile" ] || printf '%s\n' 'if [ -n "$BASH_VERSION" ] && [ -f "$HOME/.bashrc" ]; then' \
  '  . "$HOME/.bashrc"' 'fi' > "$H/.profile"
printf '[user]\n\tname = %s\n\temail = %s\n' "$NAME" "$EMAIL" > "$H/.gitconfig"
printf '[init]\n\tdefaultBranch = main\n[pull]\n\trebase = false\n' >> "$H/.gitconfig"
cat > "$H/.bash_history" <<'EOF'
cd ~/projects
ls
git status
git log --oneline | head
vim README.md
make
make test
python3 -m pytest -q
git diff
git add -A
git commit -m "wip"
ls -la
cd ..
htop
df -h
EOF
chmod 700 "$H/.ssh"
chmod 600 "$H/.bash_history"
chown -R "$U:$U" "$H"
case "$WORKDIR" in
  ""|/) ;;
  *) top=$(echo "$WORKDIR" | cut -d/ -f2)
     if [ -d "$WORKDIR" ] && ! echo " $SYSTEM_DIRS " | grep -q " $top "; then
       chown -R "$U:$U" "$WORKDIR"
     fi ;;
esac
if command -v git >/dev/null 2>&1; then git config --system --add safe.directory '*'; fi
if [ ! -s /etc/machine-id ]; then
  od -An -N16 -tx1 /dev/urandom 2>/dev/null | tr -d ' \n' > /etc/machine-id || true
  echo >> /etc/machine-id
fi
installed=$(( $(date +%s) - INSTALLED_DAYS_AGO * 86400 ))
for d in /etc /var/lib/dpkg /var/lib/apt /var/lib/apk /var/cache/debconf /var/log "$H"; do
  [ -d "$d" ] && find "$d" -xdev -newermt "@$installed" -exec touch -h -d "@$installed" {} + \
    2>/dev/null || true
done
"""


def setup_command(workdir: str | None) -> str:
    """The shell command that runs ``SCRIPT`` (saved as ``path``) for ``workdir``."""
    args = [USER, workdir or "", FULL_NAME, EMAIL, LOCALE, TIMEZONE]
    dirs = " ".join(sorted(SYSTEM_DIRS))
    variables = f"SYSTEM_DIRS={shlex.quote(dirs)} INSTALLED_DAYS_AGO={INSTALLED_DAYS_AGO}"
    return f"{variables} sh {{path}} {' '.join(map(shlex.quote, args))}"


def layer_key(image: PreparedImage, workdir: str | None) -> str:
    text = f"{image.image_id or image.tag}\n{workdir}\n{SCRIPT}\n{setup_command(workdir)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class WorkstationImages(ABC):
    @abstractmethod
    async def with_workstation(self, image: PreparedImage, workdir: str | None) -> PreparedImage:
        """``image`` with the workstation layer (built once, then cached); ImageError on a
        failed build (infrastructure: the caller retries)."""


def workstation_images(backend: SandboxBackend) -> WorkstationImages:
    if isinstance(backend, WorkstationImages):
        return backend
    raise EnvironmentUnsupported(
        f"the {backend.name} backend has no workstation profile; run with --realism off"
    )
