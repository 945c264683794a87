"""Our kustomize renderer: each supported feature with kustomize's semantics (checked against
``kubectl kustomize`` when it is installed), and clear errors for what it does not support."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from envfarm.errors import ManifestError
from tests.manifest_checks.kustomize import render
from tests.manifest_checks.kustomize_patches import json6902, strategic_merge

DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web"},
    "spec": {
        "replicas": 3,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {
                "containers": [
                    {"name": "web", "image": "envfarm", "args": ["serve", "--tasks=/t"]},
                    {"name": "side", "image": "registry:5000/side@sha256:aa", "env": []},
                ],
                "initContainers": [{"name": "init", "image": "envfarm:old"}],
                "volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}],
            },
        },
    },
}
OTHERS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "old"}},
    {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": "g"},
        "handler": "h",
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "rb"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "default"},
            {"kind": "ServiceAccount", "name": "op", "namespace": "elsewhere"},
        ],
    },
    {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": {
                    "template": {"spec": {"containers": [{"name": "c", "image": "envfarm:1"}]}}
                }
            },
        },
    },
    {
        "apiVersion": "envfarm.dev/v1alpha1",
        "kind": "EnvPool",
        "metadata": {"name": "p"},
        "spec": {"template": {"containers": [{"name": "c", "image": "envfarm"}]}},
    },
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b-config", "namespace": "z"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a-config"}},
]


def _write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, list) and data and isinstance(data[0], dict) and "apiVersion" in data[0]:
        path.write_text(yaml.safe_dump_all(data))
    else:
        path.write_text(yaml.safe_dump(data))


def _tree(root: Path) -> Path:
    """A base and an overlay using every feature the renderer supports."""
    _write(root / "base/app.yaml", [DEPLOYMENT, *OTHERS])
    _write(root / "base/kustomization.yaml", {"resources": ["app.yaml"], "namespace": "apps"})
    _write(
        root / "overlay/merge.yaml",
        [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "extra", "image": "busybox"},
                                {"name": "web", "env": [{"name": "A", "value": "1"}]},
                            ],
                            "volumes": [
                                {"name": "c", "emptyDir": {}},
                                {"name": "a", "emptyDir": None, "configMap": {"name": "x"}},
                            ],
                        }
                    }
                },
            },
        ],
    )
    _write(
        root / "overlay/ops.yaml",
        [
            {
                "op": "test",
                "path": "/spec/template/spec/containers/1/args/1",
                "value": "--tasks=/t",
            },
            {"op": "replace", "path": "/spec/template/spec/containers/1/args/1", "value": "--x"},
            {"op": "add", "path": "/spec/template/spec/containers/1/args/-", "value": "--y"},
            {"op": "copy", "from": "/spec/selector", "path": "/spec/copied"},
            {"op": "move", "from": "/spec/copied", "path": "/spec/moved"},
            {"op": "remove", "path": "/spec/moved"},
            {"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "1"}},
            {"op": "remove", "path": "/metadata/annotations/a~0b~1c"},
        ],
    )
    _write(
        root / "overlay/kustomization.yaml",
        {
            "resources": ["../base"],
            "patches": [
                {"path": "merge.yaml"},
                {
                    "path": "ops.yaml",
                    "target": {"group": "apps", "kind": "Deployment", "name": "w.b"},
                },
                {
                    "patch": "- op: replace\n  path: /spec/schedule\n  value: '0 4 * * *'",
                    "target": {"kind": "CronJob"},
                },
            ],
            "labels": [
                {"pairs": {"team": "rl"}, "includeTemplates": True},
                {"pairs": {"tier": "train"}},
            ],
            "replicas": [{"name": "web", "count": 5}],
            "images": [
                {"name": "envfarm", "newName": "mirror/envfarm", "newTag": "2"},
                {"name": "registry:5000/side", "digest": "sha256:bb"},
                {"name": "busybox", "newTag": "1.36", "digest": "sha256:cc"},
            ],
        },
    )
    return root / "overlay"


def test_every_feature_renders_as_kustomize_does(tmp_path: Path) -> None:
    resources = render(_tree(tmp_path))
    kinds = [r["kind"] for r in resources]
    assert kinds[:3] == ["Namespace", "RoleBinding", "ConfigMap"]
    assert kinds[-1] == "RuntimeClass"
    web = next(r for r in resources if r["kind"] == "Deployment")
    assert web["metadata"]["namespace"] == "apps"
    assert web["metadata"]["labels"] == {"team": "rl", "tier": "train"}
    assert web["spec"]["template"]["metadata"]["labels"] == {"app": "web", "team": "rl"}
    assert web["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    assert web["spec"]["replicas"] == 5
    pod = web["spec"]["template"]["spec"]
    assert [(c["name"], c["image"]) for c in pod["containers"]] == [
        ("extra", "busybox:1.36@sha256:cc"),
        ("web", "mirror/envfarm:2"),
        ("side", "registry:5000/side@sha256:bb"),
    ]
    assert pod["containers"][1]["args"] == ["serve", "--x", "--y"]
    assert pod["containers"][1]["env"] == [{"name": "A", "value": "1"}]
    assert pod["initContainers"][0]["image"] == "mirror/envfarm:2"
    assert pod["volumes"] == [
        {"name": "c", "emptyDir": {}},
        {"name": "a", "configMap": {"name": "x"}},
        {"name": "b", "emptyDir": {}},
    ]
    assert "annotations" not in web["metadata"]
    assert "moved" not in web["spec"]
    namespace = next(r for r in resources if r["kind"] == "Namespace")
    assert namespace["metadata"]["name"] == "apps"
    binding = next(r for r in resources if r["kind"] == "RoleBinding")
    assert [s.get("namespace") for s in binding["subjects"]] == ["apps", "elsewhere"]
    runtime = next(r for r in resources if r["kind"] == "RuntimeClass")
    assert "namespace" not in runtime["metadata"]
    pool = next(r for r in resources if r["kind"] == "EnvPool")
    assert pool["spec"]["template"]["containers"][0]["image"] == "mirror/envfarm:2"
    cron = next(r for r in resources if r["kind"] == "CronJob")
    assert cron["spec"]["schedule"] == "0 4 * * *"
    assert cron["spec"]["jobTemplate"]["metadata"]["labels"] == {"team": "rl"}


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_kustomize_agrees_on_every_feature(tmp_path: Path) -> None:
    overlay = _tree(tmp_path)
    result = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=True
    )
    assert render(overlay) == list(yaml.safe_load_all(result.stdout))


@pytest.mark.parametrize(
    ("kustomization", "message"),
    [
        ({"resources": ["app.yaml"], "commonLabels": {"a": "b"}}, "commonLabels"),
        ({"resources": ["missing.yaml"]}, "neither a file nor a directory"),
        ({"resources": ["app.yaml", "app.yaml"]}, "defined twice"),
        ({"resources": ["app.yaml"], "replicas": [{"name": "nope", "count": 1}]}, "nope"),
        (
            {"resources": ["app.yaml"], "patches": [{"patch": "- op: remove\n  path: /x"}]},
            "needs a 'target'",
        ),
        (
            {
                "resources": ["app.yaml"],
                "patches": [{"patch": "kind: Deployment\nmetadata:\n  name: other\n"}],
            },
            "no resource matches",
        ),
        (
            {
                "resources": ["app.yaml"],
                "patches": [
                    {
                        "patch": "kind: Deployment\napiVersion: apps/v1"
                        "\nmetadata: {name: web}\n$patch: delete\n"
                    }
                ],
            },
            "directive",
        ),
        (
            {
                "resources": ["app.yaml"],
                "labels": [{"pairs": {"a": "b"}, "includeSelectors": True}],
            },
            "includeSelectors",
        ),
        ({"resources": ["."]}, "cycle"),
    ],
)
def test_bad_kustomizations_are_errors_naming_the_file(
    tmp_path: Path, kustomization: dict[str, Any], message: str
) -> None:
    _write(tmp_path / "app.yaml", [DEPLOYMENT])
    _write(tmp_path / "kustomization.yaml", kustomization)
    with pytest.raises(ManifestError, match=message) as caught:
        render(tmp_path)
    assert "kustomization" in str(caught.value) or message == "cycle"


def test_a_manifest_without_a_name_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path / "app.yaml", [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}])
    _write(tmp_path / "kustomization.yaml", {"resources": ["app.yaml"]})
    with pytest.raises(ManifestError, match=r"app.yaml \(document 1\).*metadata.name"):
        render(tmp_path)


def test_json6902_failures_name_the_operation() -> None:
    document = {"spec": {"args": ["a"]}}
    with pytest.raises(ManifestError, match=r"p\[1\]: test failed"):
        json6902(
            document,
            [
                {"op": "add", "path": "/spec/x", "value": 1},
                {"op": "test", "path": "/spec/args/0", "value": "b"},
            ],
            "p",
        )
    with pytest.raises(ManifestError, match="does not exist"):
        json6902(document, [{"op": "remove", "path": "/spec/nothing"}], "p")
    with pytest.raises(ManifestError, match="unknown op"):
        json6902(document, [{"op": "frobnicate", "path": "/spec"}], "p")


def test_strategic_merge_replaces_lists_without_a_merge_key() -> None:
    target = {"spec": {"args": ["a", "b"], "ports": [{"port": 80, "name": "http"}], "x": 1}}
    strategic_merge(
        target,
        {"spec": {"args": ["c"], "ports": [{"port": 80, "targetPort": 8080}], "x": None}},
        "p",
    )
    assert target == {
        "spec": {"args": ["c"], "ports": [{"port": 80, "name": "http", "targetPort": 8080}]}
    }
