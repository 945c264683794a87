"""The engine probes of a process (can it limit a disk, can it bind-mount the helper) are
removed off the episodes' path, yet never outlive the process that made them; episodes that
start together share one probe."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time

from envfarm.sandbox.docker.client import docker_client
from envfarm.sandbox.docker.labels import LABEL_OWNER
from envfarm.sandbox.docker.sandboxd import ensure_helper

PROBING = textwrap.dedent(
    """
    import sys
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from envfarm.sandbox.docker.labels import LABEL_KIND, LABEL_MANAGED, LABEL_OWNER, owner_label
    from envfarm.sandbox.docker.sandboxd import helper_mounts
    from envfarm.sandbox.docker.storage import storage_support

    binary, image = Path(sys.argv[1]), sys.argv[2]
    labels = {LABEL_MANAGED: "true", LABEL_KIND: "probe", LABEL_OWNER: owner_label()}
    enforced = storage_support(image, labels).enforced
    with ThreadPoolExecutor(4) as pool:
        mounts = list(pool.map(lambda _: helper_mounts(binary, image), range(4)))
    assert all(m == mounts[0] for m in mounts), mounts
    print(owner_label(), len(mounts[0]), int(enforced), flush=True)
    """
)


async def test_probes_are_gone_when_the_process_has_exited(base_image: str) -> None:
    binary = await ensure_helper()
    client = docker_client()
    since = int(time.time()) - 1
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", PROBING, str(binary), base_image],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    owner, mounts, enforced = done.stdout.split()
    assert mounts == "1"  # this engine sees the helper: a bind mount, probed
    left = client.containers.list(all=True, filters={"label": f"{LABEL_OWNER}={owner}"})
    assert left == [], [c.name for c in left]
    filters = {"type": "container", "event": "create", "label": f"{LABEL_OWNER}={owner}"}
    created = list(
        client.events(since=since, until=int(time.time()) + 2, filters=filters, decode=True)
    )
    assert len(created) == 1 + int(enforced)  # one mount probe for the four callers
