"""RBAC as a real API server evaluates it: each service account of the manifests holds, in each
namespace, exactly the grants of docs/kubernetes.md's RBAC table (parsed from the page), beyond
what every service account holds anyway, and nothing anywhere else.

What every account holds anyway (discovery, self-reviews, cluster trust bundles) is measured, not
listed: the rules of a fresh account with no binding. The base's namespaces, accounts, Roles and
bindings are applied under namespace names of the test's own, so a deployed envfarm and
concurrent runs never meet these."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s.cluster import Cluster

REPO = Path(__file__).resolve().parents[2]
NAMESPACES = ("envfarm-system", "envfarm-sandboxes")
RBAC_KINDS = {"Namespace", "ServiceAccount", "Role", "RoleBinding"}
Grant = tuple[str, str, str]
"""(API group, resource or resource/subresource, verb)."""


def documented_grants() -> dict[tuple[str, str], set[tuple[str, str]]]:
    """docs/kubernetes.md's RBAC table: (account, namespace) -> {(resource, verb)}."""
    page = (REPO / "docs/kubernetes.md").read_text()
    section = page.split("\n### RBAC\n", 1)[1].split("\n### ", 1)[0]
    table: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        account = re.match(r"`([^`]+)`", cells[0]) if len(cells) == 3 else None
        if account is None:
            continue
        grants = table.setdefault((account.group(1), cells[1].strip("`")), set())
        owners: list[str] = []
        for segment in cells[2].split("; "):
            head, colon, verbs = segment.partition(": ")
            if not colon:
                continue  # "nothing, and no token is mounted"
            names = re.findall(r"`([^`]+)`", head)
            if head.startswith("their "):  # "their `status`": subresources of the last ones
                names = [f"{owner}/{name}" for owner in owners for name in names]
            else:
                owners = names
            for verb in re.sub(r"\s*\([^)]*\)", "", verbs).split(","):
                grants.update((name, verb.strip()) for name in names)
    return table


def renamed(obj: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    metadata = obj["metadata"]
    if obj["kind"] == "Namespace":
        metadata["name"] = names[metadata["name"]]
    else:
        metadata["namespace"] = names[metadata["namespace"]]
    for subject in obj.get("subjects", []):
        subject["namespace"] = names[subject["namespace"]]
    return obj


@pytest.fixture(scope="module")
def namespaces(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The base's namespaces -> the test's own; ``other`` holds a fresh account, no binding."""
    prefix = f"rbac-{secrets.token_hex(3)}"
    names = {name: f"{prefix}-{name.removeprefix('envfarm-')}" for name in NAMESPACES}
    names["other"] = f"{prefix}-other"
    rendered = yaml.safe_load_all(cluster.kustomize(str(REPO / "manifests/base")))
    objects = [renamed(obj, names) for obj in rendered if obj and obj["kind"] in RBAC_KINDS]
    objects.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names["other"]}})
    account = {"apiVersion": "v1", "kind": "ServiceAccount"}
    objects.append({**account, "metadata": {"name": "nobody", "namespace": names["other"]}})
    try:
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
        yield names
    finally:
        cluster.kubectl(
            "delete", "namespace", "--ignore-not-found", "--wait=false", *names.values()
        )


def rules(cluster: Cluster, user: str, namespace: str) -> set[Grant]:
    """The user's resource rules in ``namespace``, from a SelfSubjectRulesReview made as it."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    answer = cluster.kubectl(
        *("create", "--validate=false", "-o", "json", f"--as={user}", "-f", "-"),
        stdin=json.dumps(review),
    )
    status = json.loads(answer)["status"]
    assert not status.get("incomplete"), status.get("evaluationError")
    grants: set[Grant] = set()
    for rule in status["resourceRules"]:
        assert not rule.get("resourceNames"), f"{user}: a rule limited to names: {rule}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.update((group, resource, verb) for verb in rule["verbs"])
    return grants


def account(namespaces: dict[str, str], name: str, home: str) -> str:
    return f"system:serviceaccount:{namespaces[home]}:{name}"


def test_each_account_holds_exactly_the_documented_grants(
    cluster: Cluster, namespaces: dict[str, str]
) -> None:
    documented = documented_grants()
    accounts = {
        "envfarm-operator": "envfarm-system",
        "envfarm-controller": "envfarm-system",
        "envfarm-sandbox": "envfarm-sandboxes",
    }
    assert {name for name, _ in documented} == set(accounts)
    nobody = f"system:serviceaccount:{namespaces['other']}:nobody"
    for name, home in accounts.items():
        user = account(namespaces, name, home)
        for namespace in (*NAMESPACES, "other"):
            everyone = rules(cluster, nobody, namespaces[namespace])
            held = rules(cluster, user, namespaces[namespace]) - everyone
            expected = documented.get((name, namespace), set())
            assert {(resource, verb) for _, resource, verb in held} == expected, (name, namespace)


def test_no_account_mounts_its_token_by_default(
    cluster: Cluster, namespaces: dict[str, str]
) -> None:
    for name, home in [
        ("envfarm-sandbox", "envfarm-sandboxes"),
        ("envfarm-operator", "envfarm-system"),
        ("envfarm-controller", "envfarm-system"),
    ]:
        automount = cluster.kubectl(
            *("-n", namespaces[home], "get", "serviceaccount", name),
            *("-o", "jsonpath={.automountServiceAccountToken}"),
        )
        assert automount == "false", name  # pods that need a token ask for it themselves


@pytest.mark.parametrize(
    ("name", "home", "verb", "resource", "where"),
    [
        ("envfarm-controller", "envfarm-system", "get", "secrets", "envfarm-system"),
        ("envfarm-controller", "envfarm-system", "get", "secrets", "envfarm-sandboxes"),
        ("envfarm-controller", "envfarm-system", "get", "secrets", "other"),
        ("envfarm-controller", "envfarm-system", "create", "pods/exec", "envfarm-sandboxes"),
        ("envfarm-operator", "envfarm-system", "list", "secrets", "envfarm-sandboxes"),
        ("envfarm-operator", "envfarm-system", "get", "secrets", "envfarm-system"),
        ("envfarm-operator", "envfarm-system", "create", "pods", "other"),
        ("envfarm-operator", "envfarm-system", "create", "rolebindings", "envfarm-sandboxes"),
        ("envfarm-sandbox", "envfarm-sandboxes", "get", "pods", "envfarm-sandboxes"),
        ("envfarm-controller", "envfarm-system", "list", "namespaces", None),
        ("envfarm-operator", "envfarm-system", "list", "nodes", None),
    ],
)
def test_what_an_account_is_refused(
    cluster: Cluster,
    namespaces: dict[str, str],
    name: str,
    home: str,
    verb: str,
    resource: str,
    where: str | None,
) -> None:
    scope = ["-n", namespaces[where]] if where else []
    resource, _, subresource = resource.partition("/")  # kubectl reads pods/x as a pod's name
    answer = cluster.kubectl(
        *("auth", "can-i", verb, resource, f"--subresource={subresource}", *scope),
        f"--as={account(namespaces, name, home)}",
        check=False,
    )
    assert answer.split()[0] == "no", answer
