"""The workstation profile's pure parts: its create arguments, CPU sets and /proc/meminfo."""

from __future__ import annotations

from envfarm.sandbox.docker.workstation import (
    INIT_PATH,
    OPTIONS_ENV,
    cpuset,
    meminfo_text,
    workstation_create,
)
from envfarm.settings import WORKSTATION_USER

HOST = """MemTotal:       24683784 kB
MemFree:         7694900 kB
MemAvailable:   22422544 kB
Cached:         12000000 kB
SwapTotal:       1000000 kB
SReclaimable:    3000000 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def test_the_helper_is_init_with_no_arguments_and_no_grading_tmpfs() -> None:
    helper = ["/.envfarm/sandboxd", "--pids-limit", "1024", "--reserve-mb", "128"]
    kwargs = {
        "tmpfs": {"/logs/verifier": "rw"},
        "hostname": "sandbox",
        "environment": {},
        "cap_add": ["CHOWN"],
    }
    command, created = workstation_create(kwargs, helper, {"TERM": "dumb"}, cpus=64)
    assert command == [INIT_PATH]
    assert "tmpfs" not in created
    assert created["hostname"] != "sandbox"
    assert created["cgroupns"] == "private"
    env = created["environment"]
    assert env["TERM"] == "dumb"  # the task's own wins
    options = [*helper[1:], "--hide-container", "--sudo", "--tty", "--dress", WORKSTATION_USER]
    assert env[OPTIONS_ENV].split() == options
    assert created["cap_add"] == ["CHOWN", "NET_ADMIN", "MKNOD"]  # the dress's, given up at start
    assert "cpuset_cpus" not in created  # as many CPUs as the engine has, or more


def test_cpu_sets_have_the_tasks_cpus_and_take_turns() -> None:
    sets = [cpuset(1, 4) for _ in range(4)]
    assert sorted(sets, key=str) == ["0", "1", "2", "3"]
    assert len((cpuset(1.5, 4) or "").split(",")) == 2
    assert cpuset(4, 4) is None


def test_meminfo_agrees_with_the_limit() -> None:
    fields = {
        line.split(":")[0]: int(line.split()[1]) for line in meminfo_text(2048, HOST).splitlines()
    }
    assert fields["MemTotal"] == 2048 * 1024
    assert fields["MemFree"] <= fields["MemTotal"]
    assert fields["MemAvailable"] <= fields["MemTotal"]
    assert fields["Cached"] + fields["SReclaimable"] < fields["MemTotal"]
    assert fields["SwapTotal"] == 0
    assert fields["Hugepagesize"] == 2048


def test_an_image_the_engine_execs_in_gets_no_network_admin() -> None:
    kwargs = {"hostname": "sandbox", "environment": {}, "cap_add": ["CHOWN"]}
    _, created = workstation_create(kwargs, ["/h"], {}, cpus=64, engine_execs=True)
    assert created["cap_add"] == ["CHOWN", "MKNOD"]  # a HEALTHCHECK's exec keeps no NET_ADMIN
