"""Escape and containment probes: what a malicious agent running as root inside a sandbox tries.

``PROBE`` is one script (bash and the ``perl`` of a Debian minbase image, nothing else) that
prints one JSON object: for each attempt, what happened. Nothing in it changes the host: it
opens ``/proc/sysrq-trigger`` and a ``/sys`` file for writing and closes them unwritten, calls
``finit_module`` on a file descriptor that does not exist, mounts nothing it could keep, and
only connects to addresses the caller names (stand-ins the test itself serves). The tests
(``tests/docker/test_containment.py``) and ``bench/containment.py`` run it under runc and
gVisor and read the verdicts with ``verdicts``.
"""

from __future__ import annotations

import json
import os
from typing import Any

NAMESPACES = ("pid", "net", "ipc", "uts", "mnt")
SOCKETS = ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock")

PROBE = r"""
targets="$1"
ns() { readlink "/proc/self/ns/$1" 2>/dev/null | tr -cd '0-9'; }
sockets=0
for s in __SOCKETS__; do [ -e "$s" ] && sockets=$((sockets + 1)); done
procs=$(ls /proc | grep -c '^[0-9][0-9]*$')
pids_max=$(cat /sys/fs/cgroup/pids.max 2>/dev/null \
  || cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || echo absent)
routes=$(($(wc -l < /proc/net/route) - 1))
kernel=host; dmesg 2>/dev/null | grep -q gVisor && kernel=gvisor
perl -e '
use strict; use Socket; use Fcntl; use POSIX qw(:errno_h);
my %r;
sub err { my $e = $! + 0; return $e == EPERM ? "EPERM" : $e == EACCES ? "EACCES"
  : $e == EROFS ? "EROFS" : $e == ENOENT ? "ENOENT" : $e == EBADF ? "EBADF" : "errno $e"; }
$r{raw_socket} = socket(my $s, PF_INET, SOCK_RAW, 1) ? "opened" : err();
my ($src, $dir, $fs, $none, $root) = ("none", "/mnt", "tmpfs", "", "/");
$r{mount} = syscall(165, $src, $dir, $fs, 0, 0) == 0 ? "mounted" : err();
syscall(166, $dir, 2) if $r{mount} eq "mounted";
$r{finit_module} = syscall(313, -1, $none, 0) == 0 ? "loaded" : err();
for my $p ("/proc/sysrq-trigger", "/sys/kernel/mm/transparent_hugepage/enabled") {
  my $k = $p =~ /sysrq/ ? "sysrq_write" : "sys_write";
  if (! -e $p) { $r{$k} = "absent"; next; }
  if (sysopen(my $fh, $p, O_WRONLY)) { $r{$k} = "opened"; close $fh; } else { $r{$k} = err(); }
}
$r{chroot_escape} = syscall(161, $root) == 0 ? "chrooted" : err();
for my $t (split /,/, $ARGV[0]) {
  next unless $t;
  my ($h, $port) = split /:/, $t;
  socket(my $c, PF_INET, SOCK_STREAM, 0) or do { $r{"connect $t"} = err(); next; };
  my $ok;
  eval { local $SIG{ALRM} = sub { die "timeout\n" }; alarm 3;
         $ok = connect($c, sockaddr_in($port, inet_aton($h))); alarm 0; };
  $r{"connect $t"} = $@ ? "timeout" : $ok ? "connected" : err();
  close $c;
}
print join(",", map { "\"$_\": \"$r{$_}\"" } sort keys %r);
' "$targets" > /tmp/.envfarm-probe 2>/dev/null
printf '{"sockets": %s, "procs": %s, "pids_max": "%s", "routes": %s, "kernel": "%s"' \
  "$sockets" "$procs" "$pids_max" "$routes" "$kernel"
for n in __NAMESPACES__; do printf ', "ns_%s": "%s"' "$n" "$(ns "$n")"; done
printf ', %s}\n' "$(cat /tmp/.envfarm-probe)"
rm -f /tmp/.envfarm-probe
""".replace("__SOCKETS__", " ".join(SOCKETS)).replace("__NAMESPACES__", " ".join(NAMESPACES))


def probe_command(targets: list[str]) -> str:
    """The probe as one ``bash -c`` command; ``targets``: ``host:port`` stand-ins to try."""
    script = PROBE.replace("'", "'\\''")
    return f"bash -c '{script}' probe {','.join(targets)}"


def host_namespaces() -> dict[str, str]:
    """The inode of each of this process's namespaces (the host's, when run on the host)."""
    return {
        name: "".join(ch for ch in os.readlink(f"/proc/self/ns/{name}") if ch.isdigit())
        for name in NAMESPACES
    }


def verdicts(found: dict[str, Any], host: dict[str, str], targets: list[str]) -> dict[str, bool]:
    """For each promise, whether the probe's results keep it (True: contained)."""
    denied = {"EPERM", "EACCES", "EROFS"}
    result = {
        "no engine socket": found["sockets"] == 0,
        "no raw sockets": found["raw_socket"] in denied,
        "no mount": found["mount"] in denied,
        "no module loading": found["finit_module"] in denied,
        "no chroot": found["chroot_escape"] in denied,
        "sysrq-trigger not writable": found["sysrq_write"] in denied | {"absent"},
        "/sys not writable": found["sys_write"] in denied | {"absent"},
        "few processes visible": int(found["procs"]) < 50,
    }
    for name in NAMESPACES:
        mine = found.get(f"ns_{name}", "")
        # Under gVisor every namespace is the sandbox kernel's own (some have no link at all).
        own = found["kernel"] == "gvisor" or (bool(mine) and mine != host[name])
        result[f"own {name} namespace"] = own
    for target in targets:
        result[f"no route to {target}"] = found[f"connect {target}"] != "connected"
    return result


def parse(stdout: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stdout)
    return found
