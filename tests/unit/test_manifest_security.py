"""The manifests' security as far as it shows without an API server: namespaced least-privilege
RBAC without wildcards, the namespaces' Pod Security levels, pods with limits and read-only root
filesystems, environments cut off from the network. Whether the API server's Pod Security
admission admits the pods is tested against a real one (``tests/k8s/test_admission.py``)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.manifests import Resource, environment_pods, pod_spec_of
from tests.unit.manifest_render import (
    CONTROL_PLANE,
    SANDBOXES,
    TARGETS,
    named,
    of_kind,
    rendered,
)


@pytest.mark.parametrize("target", TARGETS)
def test_rbac_is_namespaced_and_has_no_wildcards(target: str) -> None:
    resources = rendered(target)
    assert not of_kind(resources, "ClusterRole")
    assert not of_kind(resources, "ClusterRoleBinding")
    for role in of_kind(resources, "Role"):
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in rule.get(field, []), f"{role['metadata']} grants * {field}"


def _grants(role: Resource) -> dict[str, set[str]]:
    grants: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                key = f"{group}/{resource}" if group else resource
                grants.setdefault(key, set()).update(rule["verbs"])
    return grants


def test_each_component_gets_only_what_it_needs() -> None:
    resources = rendered("base")
    controller = _grants(named(resources, "Role", "envfarm-controller", SANDBOXES))
    operator = _grants(named(resources, "Role", "envfarm-operator", SANDBOXES))
    leader = _grants(named(resources, "Role", "envfarm-operator", CONTROL_PLANE))
    controller_home = _grants(named(resources, "Role", "envfarm-controller", CONTROL_PLANE))
    # The in-pod helper is driven over an attach stream: create (SPDY, and WebSocket from
    # 1.35) and get (WebSocket before 1.35); never exec.
    assert controller["pods/attach"] == {"create", "get"}
    for grants in (controller, operator, leader, controller_home):
        assert "pods/exec" not in grants
        assert not {"roles", "rolebindings", "serviceaccounts"} & {k.split("/")[-1] for k in grants}
        assert not {"bind", "escalate", "impersonate", "deletecollection"} & set().union(
            *grants.values()
        )
    assert operator["secrets"] == {"get"}  # read the API keys a RolloutJob names, never list
    assert "secrets" not in controller
    assert operator["envfarm.dev/rolloutjobs/finalizers"] == {"update"}
    leases, events = {"get", "create", "update"}, {"create", "patch"}
    assert leader == {"coordination.k8s.io/leases": leases, "events": events}
    # Whether the controller pod owning an environment still exists: one pod, by name.
    assert controller_home == {"pods": {"get"}}


@pytest.mark.parametrize("target", TARGETS)
def test_bindings_point_at_roles_and_service_accounts_that_exist(target: str) -> None:
    resources = rendered(target)
    accounts = {
        (r["metadata"]["namespace"], r["metadata"]["name"])
        for r in of_kind(resources, "ServiceAccount")
    }
    for binding in of_kind(resources, "RoleBinding"):
        namespace = binding["metadata"]["namespace"]
        named(resources, "Role", binding["roleRef"]["name"], namespace)
        for subject in binding["subjects"]:
            assert (subject["namespace"], subject["name"]) in accounts
    for resource in resources:
        spec = pod_spec_of(resource)
        if spec is not None and "serviceAccountName" in spec:
            assert (resource["metadata"]["namespace"], spec["serviceAccountName"]) in accounts


@pytest.mark.parametrize("target", TARGETS)
def test_the_namespaces_enforce_their_pod_security_levels(target: str) -> None:
    levels = {
        n["metadata"]["name"]: n["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for n in of_kind(rendered(target), "Namespace")
    }
    assert levels == {CONTROL_PLANE: "restricted", SANDBOXES: "baseline"}


@pytest.mark.parametrize("target", TARGETS)
def test_pods_have_limits_and_read_only_root_filesystems(target: str) -> None:
    resources = rendered(target)
    workloads = [r for r in resources if pod_spec_of(r) is not None]
    assert workloads
    for workload in workloads:
        spec = pod_spec_of(workload)
        assert spec is not None
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            limits, requests = container["resources"]["limits"], container["resources"]["requests"]
            assert {"cpu", "memory"} <= set(limits) & set(requests), container["name"]


def test_environments_are_cut_off_from_the_network() -> None:
    resources = rendered("base")
    deny = named(resources, "NetworkPolicy", "envfarm-environments-deny-all", SANDBOXES)
    assert deny["spec"]["podSelector"] == {
        "matchExpressions": [{"key": "envfarm.dev/environment", "operator": "Exists"}]
    }
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert not {"ingress", "egress"} & set(deny["spec"])
    policies = of_kind(resources, "NetworkPolicy")
    assert all("Ingress" not in p["spec"]["policyTypes"] or p is deny for p in policies)
    internet = named(resources, "NetworkPolicy", "envfarm-environments-internet", SANDBOXES)
    blocks = [
        peer["ipBlock"]
        for rule in internet["spec"]["egress"]
        for peer in rule["to"]
        if "ipBlock" in peer
    ]
    excepted = {cidr for block in blocks for cidr in block["except"]}
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= excepted


def test_the_gvisor_runtime_class_runs_runsc() -> None:
    runtime = named(rendered("base"), "RuntimeClass", "gvisor")
    assert runtime["handler"] == "runsc"


def test_environment_pods_fit_the_sandbox_namespace() -> None:
    """The pod builder's pods for every example task (PostgreSQL and Redis sidecars included)
    are valid Pods that use the manifests' service account and runtime class, and are selected
    by the deny-all policy."""
    resources = rendered("base")
    deny = named(resources, "NetworkPolicy", "envfarm-environments-deny-all", SANDBOXES)
    selector_key = deny["spec"]["podSelector"]["matchExpressions"][0]["key"]
    pods = environment_pods()
    assert len(pods) >= 10
    for pod in pods:
        kubernetes_validate.validate(pod, "1.29.0", strict=True)
        named(resources, "ServiceAccount", pod["spec"]["serviceAccountName"], SANDBOXES)
        named(resources, "RuntimeClass", pod["spec"]["runtimeClassName"])
        assert selector_key in pod["metadata"]["labels"]
