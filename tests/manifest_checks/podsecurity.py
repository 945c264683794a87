"""The Pod Security Standards (``baseline`` and ``restricted``) as a pure check over pod specs.

A namespace labelled ``pod-security.kubernetes.io/enforce: restricted`` rejects pods that break
a rule below, and a Deployment whose template breaks one never gets a pod: the failure shows
up as events on a ReplicaSet, long after ``kubectl apply`` said everything was fine. Checking
the rendered templates up front turns that into a test failure with the field named. The
rules follow the "latest" policy of the standards (Kubernetes 1.29 and later).
"""

from __future__ import annotations

from typing import Any, Literal

Level = Literal["baseline", "restricted"]
PodSpec = dict[str, Any]

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ping_group_range",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_syncookies",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
TEMPLATE_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def pod_spec_of(resource: dict[str, Any]) -> PodSpec | None:
    """The pod spec a workload object creates pods from (None for other kinds)."""
    kind, spec = resource.get("kind"), resource.get("spec") or {}
    if kind == "Pod":
        return dict(spec)
    if kind in TEMPLATE_KINDS:
        return dict((spec.get("template") or {}).get("spec") or {})
    if kind == "CronJob":
        job = (spec.get("jobTemplate") or {}).get("spec") or {}
        return dict((job.get("template") or {}).get("spec") or {})
    return None


def _containers(spec: PodSpec) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{field}[{container.get('name', index)}]", container)
        for field in ("initContainers", "containers", "ephemeralContainers")
        for index, container in enumerate(spec.get(field) or [])
    ]


def _baseline(spec: PodSpec) -> list[str]:
    problems = [
        f"{field}: must not be true"
        for field in ("hostNetwork", "hostPID", "hostIPC")
        if spec.get(field)
    ]
    pod = spec.get("securityContext") or {}
    contexts = [("securityContext", pod)] + [
        (f"{where}.securityContext", c.get("securityContext") or {})
        for where, c in _containers(spec)
    ]
    for where, context in contexts:
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"{where}.windowsOptions.hostProcess: must not be true")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{where}.seccompProfile.type: must not be Unconfined")
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{where}.appArmorProfile.type: must not be Unconfined")
        selinux = context.get("seLinuxOptions") or {}
        if (
            selinux.get("type", "") not in SELINUX_TYPES
            or selinux.get("user")
            or selinux.get("role")
        ):
            problems.append(f"{where}.seLinuxOptions: only the container types are allowed")
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{where}.securityContext.privileged: must not be true")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            problems.append(f"{where}: capabilities {sorted(added - BASELINE_CAPABILITIES)} added")
        if context.get("procMount", "Default") != "Default":
            problems.append(f"{where}.securityContext.procMount: must be Default")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            problems.append(f"{where}.ports: host ports are not allowed")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"volumes[{volume.get('name')}]: hostPath is not allowed")
    for sysctl in pod.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"securityContext.sysctls: {sysctl.get('name')} is not a safe sysctl")
    return problems


def _restricted(spec: PodSpec) -> list[str]:
    problems: list[str] = []
    pod = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if kinds - RESTRICTED_VOLUMES:
            problems.append(f"volumes[{volume.get('name')}]: {sorted(kinds)} is not allowed")
    if pod.get("runAsUser") == 0:
        problems.append("securityContext.runAsUser: must not be 0")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}.securityContext.allowPrivilegeEscalation: must be false")
        non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if non_root is not True:
            problems.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if context.get("runAsUser") == 0:
            problems.append(f"{where}.securityContext.runAsUser: must not be 0")
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{where}.securityContext.capabilities.drop: must include ALL")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}.securityContext.capabilities.add: only NET_BIND_SERVICE")
    return problems


def pod_security_problems(spec: PodSpec, level: Level) -> list[str]:
    """What in ``spec`` the Pod Security Standard ``level`` forbids (empty when it passes)."""
    problems = _baseline(spec)
    if level == "restricted":
        problems += _restricted(spec)
    return problems
