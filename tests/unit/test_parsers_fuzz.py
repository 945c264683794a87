"""Property-based tests of what users and endpoints hand envfarm: ``task.toml``, compose
files, Dockerfile ``FROM`` lines, tool-call arguments and endpoint responses. Each either
parses or gives envfarm's own error (an ``EnvfarmError`` naming what was wrong), never a
traceback of something else."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from envfarm.agent.tools import parse_arguments
from envfarm.errors import EnvfarmError
from envfarm.policy.base import ToolCallRaw, parse_completion
from envfarm.sandbox.images.task_image import dockerfile_bases, rewrite_dockerfile
from envfarm.spec.compose_load import read_compose
from envfarm.spec.task import load_task


def envfarm_error(call: Callable[[], object]) -> str | None:
    """None when ``call`` succeeds; the message of the ``EnvfarmError`` it raised otherwise
    (anything else propagates and fails the test)."""
    try:
        call()
    except EnvfarmError as exc:
        return str(exc)
    return None


EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

toml_scalars = st.one_of(
    st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.booleans(), st.text(max_size=20)
)
TASK_KEYS = {
    "task": ["name", "version", "description"],
    "agent": ["timeout_sec", "user", "max_turns"],
    "verifier": ["timeout_sec", "environment_mode", "reward"],
    "environment": ["memory_mb", "cpus", "workdir", "network_mode", "docker_image", "storage_mb"],
}


def _toml_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, bool) else str(value).lower()


@st.composite
def task_tomls(draw: st.DrawFn) -> str:
    lines = []
    for table, keys in TASK_KEYS.items():
        if draw(st.booleans()):
            lines.append(f"[{table}]")
            for key in draw(st.lists(st.sampled_from(keys), unique=True)):
                lines.append(f"{key} = {_toml_value(draw(toml_scalars))}")
    if draw(st.booleans()):
        lines.append(draw(st.text(max_size=40)))
    return "\n".join(lines) + "\n"


@EXAMPLES
@given(task_tomls())
def test_any_task_toml_loads_or_is_a_clear_spec_error(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "t"
        (root / "environment").mkdir(parents=True)
        (root / "tests").mkdir()
        (root / "task.toml").write_text(text)
        (root / "instruction.md").write_text("Do it.\n")
        (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
        (root / "tests" / "test.sh").write_text("true\n")
        message = envfarm_error(lambda: load_task(root))
        assert message is None or "task.toml" in message or str(root) in message


yaml_leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12))
yaml_trees = st.recursive(
    yaml_leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
SERVICE_KEYS = ["image", "build", "ports", "volumes", "networks", "environment", "deploy",
                "depends_on", "command", "healthcheck", "network_mode", "mem_limit"]  # fmt: skip


@st.composite
def compose_documents(draw: st.DrawFn) -> Any:
    services = {
        name: {key: draw(yaml_trees) for key in draw(st.lists(st.sampled_from(SERVICE_KEYS)))}
        for name in draw(st.lists(st.sampled_from(["main", "db", "cache"]), unique=True))
    }
    document: dict[str, Any] = {"services": services}
    for top in draw(st.lists(st.sampled_from(["volumes", "networks", "x-extra"]), unique=True)):
        document[top] = draw(yaml_trees)
    return draw(st.one_of(st.just(document), yaml_trees))


@EXAMPLES
@given(compose_documents())
def test_any_compose_file_loads_or_is_a_list_of_issues(document: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env_dir = Path(tmp)
        path = env_dir / "docker-compose.yaml"
        path.write_text(json.dumps(document))  # JSON is YAML
        message = envfarm_error(lambda: read_compose(path, env_dir, {}))
        assert message is None or "docker-compose.yaml" in message


TOOL_KEYS = ["command", "path", "content", "timeout_s", "x"]
dockerfile_words = st.sampled_from(
    [
        "FROM",
        "from",
        "ARG",
        "AS",
        "--platform=linux/amd64",
        "${BASE}",
        "$TAG",
        "python:3.11",
        "debian:bookworm-slim",
        "scratch",
        "base",
        "=",
        ":",
        "@sha256:",
        "\\",
        "\n",
        " ",
    ]
)


@EXAMPLES
@given(st.lists(st.one_of(dockerfile_words, st.text(max_size=6)), max_size=25))
def test_any_dockerfile_resolves_its_bases_or_says_which_line(words: list[str]) -> None:
    text = " ".join(words)

    def resolve() -> None:
        bases = dockerfile_bases(text, "Dockerfile")
        rewrite_dockerfile(text, dict.fromkeys(bases, "envfarm/base:x"), "Dockerfile")

    message = envfarm_error(resolve)
    assert message is None or "Dockerfile" in message


@EXAMPLES
@given(
    st.sampled_from(["bash", "read_file", "write_file", "edit_file", "submit", "nope"]),
    st.one_of(
        st.text(max_size=30),
        st.builds(json.dumps, yaml_trees),
        st.builds(
            json.dumps,
            st.dictionaries(
                st.sampled_from(["command", "path", "content", "timeout_s", "x"]), yaml_leaves
            ),
        ),
    ),
)
def test_any_tool_call_arguments_validate_or_explain_to_the_model(
    name: str, arguments: str
) -> None:
    parsed = parse_arguments(ToolCallRaw(id="c", name=name, arguments=arguments))
    assert isinstance(parsed, BaseModel) or (isinstance(parsed, str) and name in parsed)


BODY_KEYS = [
    "choices",
    "message",
    "content",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "usage",
    "id",
    "index",
]
BODY_KEYS += ["finish_reason", "logprobs", "role", "prompt_tokens", "type"]
json_leaves = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)
)
json_values = st.recursive(
    json_leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(BODY_KEYS), inner, max_size=4)
    ),
    max_leaves=20,
)


@EXAMPLES
@given(st.one_of(st.binary(max_size=40), st.builds(lambda v: json.dumps(v).encode(), json_values)))
def test_any_endpoint_body_parses_or_is_a_policy_error(body: bytes) -> None:
    message = envfarm_error(
        lambda: parse_completion(
            body, url="http://127.0.0.1:1/v1", endpoint="chat", model="m", sampling={},
            latency_s=0.0,
        )
    )  # fmt: skip
    assert message is None or message.strip()


def test_a_compose_file_with_a_lone_surrogate_escape_is_an_issue_not_a_traceback(
    tmp_path: Path,
) -> None:
    """Found by the property above: YAML's ``"\\ud800"`` is a string Python cannot encode."""
    path = tmp_path / "docker-compose.yaml"
    path.write_text('{"services": {"main": {"image": "\\ud800"}}}')
    loaded = read_compose(path, tmp_path, {})
    assert [issue.message for issue in loaded.issues] == [
        "invalid text: an escape that is no character (surrogates not allowed)"
    ]
