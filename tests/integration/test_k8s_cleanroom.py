"""Clean-room grading on the Kubernetes backend, against the in-memory API and simulated kubelet.

Each pod's main container is a ``RootfsSandbox``: a copy of a small root filesystem (the host's
bash, find, tar and coreutils with their libraries, and an ``/app`` workdir as the "image" has
it) that commands run in under ``chroot``, so the workdir listing and carry run the real tools.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from envfarm.errors import SandboxError
from envfarm.grading.base import Graded, Grader
from envfarm.grading.session import EpisodeGrading
from envfarm.k8s.api import PODS, KubeObject
from envfarm.models.trajectory import Reward
from envfarm.plan.models import VerifierPlan
from envfarm.sandbox.base import ExecResult, Sandbox
from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
from envfarm.sandbox.kubernetes.podspec import LABEL_NETWORK
from envfarm.sandbox.kubernetes.verifier_pod import LABEL_VERIFIER_OF
from envfarm.spec.network import VERIFIER_NETWORK_ENV
from envfarm.spec.task import Task, load_task
from envfarm.testing.k8s.fakeruntime import FakePodRuntime
from envfarm.testing.k8s.kubelet import SimulatedKubelet
from envfarm.testing.k8s.memory import MemoryKubeApi
from tests.plans import sandbox_spec, verifier_plan
from tests.waiting import until

TASKS = Path(__file__).resolve().parents[2] / "tasks"
CHROOT = shutil.which("chroot") or "chroot"
TOOLS = ("bash", "find", "tar", "date", "stat", "rm", "mkdir", "xargs", "tail", "cat")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("chroot") is None, reason="needs root and chroot"
)


def build_rootfs(root: Path) -> None:
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (root / target).mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(target)
    for tool in TOOLS:
        binary = Path(shutil.which(tool) or f"/usr/bin/{tool}").resolve()
        shutil.copy2(binary, root / "usr/bin" / tool)
        linked = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
        for line in linked.splitlines():
            path = next((word for word in line.split() if word.startswith("/")), None)
            if path:
                (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, root / path.lstrip("/"))
    (root / "tmp").mkdir(mode=0o1777)
    (root / "dev").mkdir()
    os.mknod(root / "dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    app = root / "app"
    (app / "tests").mkdir(parents=True)
    (app / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (app / "notes.txt").write_text("keep\n")
    (app / "old.txt").write_text("remove me\n")
    (app / "tests" / "test_calc.py").write_text("assert add(1, 2) == 3\n")


class RootfsSandbox(Sandbox):
    def __init__(self, image: Path, scratch: Path) -> None:
        self.image, self.root = image, scratch / uuid.uuid4().hex
        self.commands: list[str] = []

    async def start(self) -> None:
        await asyncio.to_thread(shutil.copytree, self.image, self.root, symlinks=True)

    async def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        self.commands.append(command)
        script = f"cd {workdir} && {command}" if workdir else command
        process = await asyncio.create_subprocess_exec(
            CHROOT, str(self.root), "/bin/bash", "-c", script,
            env={"PATH": "/usr/bin", **(env or {})},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        return ExecResult(exit_code=process.returncode, stdout=out.decode(), stderr=err.decode())

    async def read_file(self, path: str, *, user: str | None = None) -> bytes:
        return (self.root / path.lstrip("/")).read_bytes()

    async def write_file(
        self, path: str, data: bytes, mode: int = 0o644, *, user: str | None = None
    ) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)

    def tree(self, under: str) -> dict[str, str]:
        base = self.root / under.lstrip("/")
        return {
            str(p.relative_to(base)): p.read_text() for p in sorted(base.rglob("*")) if p.is_file()
        }

    async def _teardown(self) -> None:
        await asyncio.to_thread(shutil.rmtree, self.root, True)


class RecordingGrader(Grader):
    """Notes the pods, and the files of the verifier's, while it grades."""

    def __init__(self, api: MemoryKubeApi, runtime: FakePodRuntime) -> None:
        self.api, self.runtime = api, runtime
        self.graded_in: Sandbox | None = None
        self.pods: list[KubeObject] = []
        self.files: dict[str, dict[str, str]] = {}
        self.commands: list[str] = []

    async def grade(self, sandbox: Sandbox, plan: VerifierPlan) -> Graded:
        self.graded_in = sandbox
        self.pods = self.api.objects(PODS)
        container = self.runtime.sandbox_of(self.pods[-1])
        assert isinstance(container, RootfsSandbox)
        self.files = {where: container.tree(where) for where in ("/app", "/tmp")}
        self.commands = list(container.commands)
        calc = (await sandbox.read_file("/app/calc.py")).decode()
        return Graded(Reward(value=1.0 if "a + b" in calc else 0.0, valid=True))


def in_mode(task: Task, mode: str, workdir: str | None = None) -> Task:
    verifier = task.config.verifier.model_copy(update={"environment_mode": mode})
    config = task.config.model_copy(update={"verifier": verifier})
    if workdir is not None:
        environment = config.environment.model_copy(update={"workdir": workdir})
        config = config.model_copy(update={"environment": environment})
    return dataclasses.replace(task, config=config)


@pytest.fixture
def cluster(tmp_path: Path) -> tuple[MemoryKubeApi, FakePodRuntime, SimulatedKubelet]:
    image = tmp_path / "image"
    build_rootfs(image)
    api = MemoryKubeApi()
    runtime = FakePodRuntime(lambda pod: RootfsSandbox(image, tmp_path))
    kubelet = SimulatedKubelet(api, runtime=runtime, probe_period_s=0.01)
    return api, runtime, kubelet


async def test_a_clean_verifier_runs_in_a_fresh_pod_with_only_the_agents_changes(
    cluster: tuple[MemoryKubeApi, FakePodRuntime, SimulatedKubelet],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the strict setting: the verifier's pod is the agent's spec, no network (the default's
    # public verifier pod: tests/unit/test_network_default.py)
    monkeypatch.setenv(VERIFIER_NETWORK_ENV, "none")
    api, runtime, _ = cluster
    task = in_mode(load_task(TASKS / "word-count-cli"), "clean", workdir="/app")
    backend = KubernetesBackend(api, KubernetesBackendConfig())
    sandbox = backend.create(
        sandbox_spec(task), await backend.prepare(sandbox_spec(task)), run_id="run-clean"
    )
    await sandbox.start()
    [agent_pod] = api.objects(PODS)
    agent_fs = runtime.sandbox_of(agent_pod)
    assert isinstance(agent_fs, RootfsSandbox)
    await asyncio.sleep(2.5)  # the image's files are older than the carry's ctime margin
    grader = RecordingGrader(api, runtime)
    grading = EpisodeGrading(verifier_plan(task), sandbox, grader, inspect=False)
    await grading.before_agent()
    agent = (
        "cd /app && printf 'def add(a, b):\\n    return a + b\\n' > calc.py && rm old.txt"
        " && mkdir -p pkg && echo new > pkg/extra.py && echo 'assert True' > tests/test_calc.py"
        " && echo planted > /tmp/sitecustomize.py"
    )
    assert (await sandbox.exec(agent)).exit_code == 0
    await grading.after_agent([])
    reward = await grading.grade()
    assert (reward.valid, reward.value) == (True, 1.0)

    assert grading.carry is not None
    carried = sorted(grading.carry.carried)
    assert carried == ["app/calc.py", "app/pkg", "app/pkg/extra.py"], carried
    restored = (grading.carry.deleted, grading.carry.restored)
    assert restored == (["app/old.txt"], ["app/tests/test_calc.py"])
    assert grading.carry.withheld == [("tmp/sitecustomize.py", "interpreter start-up hook")]
    live = [pod for pod in grader.pods if not pod["metadata"].get("deletionTimestamp")]
    [verifier_pod] = live  # the agent's pod is gone, or being deleted (graceful, under load)
    labels = verifier_pod["metadata"]["labels"]
    assert verifier_pod["metadata"]["name"] == f"{agent_pod['metadata']['name']}-verifier"
    assert labels[LABEL_VERIFIER_OF] == agent_pod["metadata"]["name"]
    assert labels[LABEL_NETWORK] == "none"
    assert verifier_pod["spec"] == agent_pod["spec"]
    assert grader.graded_in is not None
    assert grader.graded_in is not sandbox
    assert grader.files["/app"] == {
        "calc.py": "def add(a, b):\n    return a + b\n",
        "notes.txt": "keep\n",
        "pkg/extra.py": "new\n",
        "tests/test_calc.py": "assert add(1, 2) == 3\n",
    }
    assert grader.files["/tmp"] == {}
    assert not any("sitecustomize" in c for c in grader.commands)
    await until(lambda: not agent_fs.root.exists())  # the agent's container ends with its pod
    with pytest.raises(SandboxError, match="stopped for its clean-room verifier"):
        await sandbox.exec("true")

    await sandbox.stop()
    assert api.objects(PODS) == []
    assert runtime.sandboxes == {}
    await backend.close()
    await api.close()
