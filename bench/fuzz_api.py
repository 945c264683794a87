"""Schemathesis against ``envfarm serve --no-worker`` with a larger example budget than the
test (tests/integration/test_api_fuzz.py, same checks): prints the operations, the generated
requests sent, and the failures (must be 0).

    python bench/fuzz_api.py [EXAMPLES_PER_OPERATION]
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.serve_process import ServeProcess  # noqa: E402
from tests.integration.test_api_fuzz import TOKEN, fuzz_operations  # noqa: E402


def main() -> None:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        shutil.copytree(REPO / "tasks" / "word-count-cli", workdir / "tasks" / "word-count-cli")
        server = ServeProcess(
            workdir, "--no-worker", "--db", f"sqlite:///{workdir / 'store.db'}", "--tasks",
            "tasks", "--data-dir", "data", token=TOKEN,
        ).start()  # fmt: skip
        try:
            openapi = requests.get(
                f"{server.url}/openapi.json",
                headers={"Authorization": f"Bearer {TOKEN}"},
                timeout=30,
            ).json()
            started = time.monotonic()
            ran, failures = fuzz_operations(openapi, server.url, examples, TOKEN)
            elapsed = time.monotonic() - started
        finally:
            server.kill()
        log = server.output()
    operations = sum(len(ops) for ops in openapi["paths"].values())
    print(f"operations {operations}, examples per operation <= {examples}")
    print(f"requests sent {ran} in {elapsed:.0f} s ({ran / elapsed:.0f}/s)")
    print(f"failures {len(failures)}; tracebacks in the server log {log.count('Traceback')}")
    print(f"token in the server log: {TOKEN in log}")
    for failure in failures:
        print("-", failure[:2000])


if __name__ == "__main__":
    main()
