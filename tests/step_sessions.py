"""What a trainer's loop does through the step API on envfarm's example tasks, shared by the
Docker and the Kubernetes tests of ``/v1/openenv``."""

from __future__ import annotations

from openenv.core import GenericEnvClient

from tests.conftest import REPO

PG_TASK = REPO / "tasks" / "pg-schema-migration"


async def migrate_pg_schema(base_url: str) -> str:
    """A session of ``pg-schema-migration`` solved by the trainer's own actions (the solution's
    migration written, then applied beside the database service); asserts every step went
    through and the episode was graded 1.0, and returns its job id."""
    migration = (PG_TASK / "solution" / "002_split_customer_name.sql").read_text()
    write = {"path": "/app/migrations/002_split_customer_name.sql", "content": migration}
    async with GenericEnvClient(base_url=base_url, message_timeout_s=600) as env:
        opened = await env.reset(task="pg-schema-migration")
        wrote = await env.step({"tool": "write_file", "arguments": write})
        migrated = await env.step({"tool": "bash", "arguments": {"command": "python3 migrate.py"}})
        graded = await env.step({"tool": "submit"})
    assert wrote.observation["error"] is None
    assert migrated.observation["exit_code"] == 0, migrated.observation["output"]
    assert graded.reward == 1.0, graded.observation
    return str(opened.observation["job_id"])
