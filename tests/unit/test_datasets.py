"""SWE-bench-style records read as tasks: fields, image naming, test commands, bad records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envfarm.spec.datasets.source import instance_image
from envfarm.spec.task import discover_tasks

GOLD = """diff --git a/calc/core.py b/calc/core.py
--- a/calc/core.py
+++ b/calc/core.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
TEST_PATCH = """diff --git a/tests/test_core.py b/tests/test_core.py
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -1,3 +1,7 @@
 from calc.core import add
+
+
+def test_add():
+    assert add(2, 3) == 5
"""


def record(instance_id: str, **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "instance_id": instance_id,
        "repo": "psf/requests",
        "base_commit": "a" * 40,
        "problem_statement": "add() subtracts.",
        "patch": GOLD,
        "test_patch": TEST_PATCH,
        "FAIL_TO_PASS": json.dumps(["tests/test_core.py::test_add"]),
        "PASS_TO_PASS": ["tests/test_core.py::test_sub"],
        "version": 2.0,
        "unrelated_field": {"kept": "out"},
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ENVFARM_DATASET_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ENVFARM_DATASET_IMAGE", raising=False)
    monkeypatch.delenv("ENVFARM_DATASET_COMMANDS", raising=False)
    return tmp_path / "cache"


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_default_image_is_the_swebench_harness_naming() -> None:
    assert (
        instance_image("django__django-11099")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert instance_image("Org__Repo-1", "reg:5000/{instance_id}:v") == "reg:5000/Org__Repo-1:v"


def test_a_record_is_an_ordinary_task(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", [record("psf__requests-1")])
    (task,), errors = discover_tasks([data])
    assert errors == []
    assert task.id == "psf__requests-1"
    assert task.instruction == "add() subtracts.\n"
    config = task.config
    assert config.environment.docker_image == (
        "swebench/sweb.eval.x86_64.psf_1776_requests-1:latest"
    )
    assert config.environment.workdir == "/testbed"
    assert config.verifier.environment_mode == "clean"
    assert config.verifier.fail_to_pass == ["tests/test_core.py::test_add"]
    assert config.verifier.pass_to_pass == ["tests/test_core.py::test_sub"]
    assert config.verifier.reports == ["swebench.pytest.log"]
    assert config.metadata["source_line"] == f"{data}:1"
    assert (task.tests_dir / "test.patch").read_text() == TEST_PATCH
    assert task.solution_dir is not None
    assert (task.solution_dir / "gold.patch").read_text() == GOLD
    script = (task.tests_dir / "test.sh").read_text()
    assert "pytest -rA --tb=no -p no:cacheprovider tests/test_core.py" in script
    assert TEST_PATCH not in task.instruction


def test_bad_records_name_file_line_and_instance_and_the_good_ones_load(tmp_path: Path) -> None:
    records = [
        record("ok__one-1"),
        record("missing__field-2", base_commit=None),
        record("unknown__repo-3", repo="acme/unknown"),
        record("not__a-diff-4", patch="just text"),
        record("ok__one-1"),
        record("ok__two-5", repo="acme/unknown", test_cmd="python -m pytest -rA"),
    ]
    data = write_jsonl(tmp_path / "data.jsonl", records)
    tasks, errors = discover_tasks([data])
    assert sorted(t.id for t in tasks) == ["ok__one-1", "ok__two-5"]
    messages = sorted(str(e) for e in errors)
    assert messages == [
        f"{data}:2: instance 'missing__field-2': base_commit: missing",
        f"{data}:3: instance 'unknown__repo-3': no test command for repository 'acme/unknown': "
        "add it to a table named by ENVFARM_DATASET_COMMANDS (docs/datasets.md) or give the "
        "record a 'test_cmd'",
        f"{data}:4: instance 'not__a-diff-4': patch is not a unified diff (no 'diff --git' or "
        "'+++ b/' header)",
        f"{data}:5: instance 'ok__one-1': duplicate instance_id, first at {data}:1",
    ]
    (two,) = [t for t in tasks if t.id == "ok__two-5"]
    assert "python -m pytest -rA tests/test_core.py" in (two.tests_dir / "test.sh").read_text()


def test_a_json_array_names_the_line_each_record_starts_on(tmp_path: Path) -> None:
    text = "[\n" + json.dumps(record("a__b-1")) + ",\n\n" + json.dumps(record("a__b-2", repo="x/y"))
    data = tmp_path / "data.json"
    data.write_text(text + "\n]\n")
    tasks, errors = discover_tasks([data])
    assert [t.id for t in tasks] == ["a__b-1"]
    assert [e.path for e in errors] == [f"{data}:4"]


def test_a_user_table_adds_a_repository_and_a_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "commands.toml"
    table.write_text(
        '[repos."acme/calc"]\ntest_cmd = "python -m pytest -rA"\n'
        '[repos."acme/calc".versions."2.0"]\ntest_cmd = "tox -e py --"\n'
        '[repos."sympy/sympy"]\nsetup = ["export X=1"]\n'
    )
    monkeypatch.setenv("ENVFARM_DATASET_COMMANDS", str(table))
    data = write_jsonl(
        tmp_path / "data.jsonl",
        [
            record("acme__calc-1", repo="acme/calc", version="1.0"),
            record("acme__calc-2", repo="acme/calc"),
            record("sympy__sympy-3", repo="sympy/sympy"),
        ],
    )
    tasks, errors = discover_tasks([data])
    assert errors == []
    scripts = {t.id: (t.tests_dir / "test.sh").read_text() for t in tasks}
    assert "\npython -m pytest -rA tests/test_core.py >" in scripts["acme__calc-1"]
    assert "\ntox -e py -- tests/test_core.py >" in scripts["acme__calc-2"]
    sympy = scripts["sympy__sympy-3"]
    assert "bin/test -C --verbose tests/test_core.py" in sympy
    assert "export X=1" in sympy
    (sympy_task,) = [t for t in tasks if t.id == "sympy__sympy-3"]
    assert sympy_task.config.verifier.reports == ["swebench.sympy.log"]


def test_django_is_given_module_labels(tmp_path: Path) -> None:
    patch = TEST_PATCH.replace("tests/test_core.py", "tests/admin_views/test_forms.py")
    data = write_jsonl(
        tmp_path / "d.jsonl", [record("django__django-1", repo="django/django", test_patch=patch)]
    )
    (task,), _ = discover_tasks([data])
    script = (task.tests_dir / "test.sh").read_text()
    assert "--parallel 1 admin_views.test_forms >" in script
    assert task.config.verifier.reports == ["swebench.django.log"]


def test_a_parquet_split_is_selected(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {**record("a__b-1"), "split": "test"},
        {**record("a__b-2"), "split": "dev"},
    ]
    for row in rows:
        row.pop("unrelated_field")
        row["PASS_TO_PASS"] = json.dumps(row["PASS_TO_PASS"])
        row["version"] = str(row["version"])
    path = tmp_path / "data.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    tasks, errors = discover_tasks([Path(f"{path}:dev")])
    assert errors == []
    assert [t.id for t in tasks] == ["a__b-2"]
    _, errors = discover_tasks([Path(f"{path}:train")])
    assert [str(e) for e in errors] == [f"{path}:train: no record of split 'train'"]


def test_materialising_twice_reuses_the_directory(tmp_path: Path, cache: Path) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", [record("a__b-1")])
    (first,), _ = discover_tasks([data])
    (second,), _ = discover_tasks([data])
    assert first.root == second.root
    assert first.content_hash == second.content_hash
    assert [p.name for p in cache.iterdir()] == [first.root.name]


def test_serve_takes_a_dataset_file_as_its_task_source(tmp_path: Path) -> None:
    from envfarm.cli.serve import _load_tasks

    data = write_jsonl(tmp_path / "data.jsonl", [record("a__b-1"), record("a__b-2", repo="x/y")])
    assert list(_load_tasks(data)) == ["a__b-1"]
