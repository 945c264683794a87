"""Migration 0006 on a real SQLite file and a real PostgreSQL: a job's leave-one-out setting
moves from its request to a column (read back from every stored request), and groups get an
index by sequence; downgrading drops both."""

from __future__ import annotations

from sqlalchemy import inspect, text

from envfarm.store.engine import normalize_url, open_engine
from envfarm.store.migrate import head_revision
from tests.store_fixtures import migrate

REQUESTS = {"loo": '{"tasks": ["t"], "leave_one_out": true}', "plain": '{"tasks": ["t"]}'}


def test_leave_one_out_is_read_from_each_request_into_its_column(db_url: str) -> None:
    engine = open_engine(normalize_url(db_url))
    try:
        migrate(engine, "0005")
        with engine.begin() as connection:
            for job_id, request in REQUESTS.items():
                connection.execute(
                    text(
                        "INSERT INTO jobs (id, status, priority, stale_policy, max_retries,"
                        " request, last_cursor, created_at, updated_at) VALUES"
                        " (:id, 'queued', 0, 'mark', 0, :request, 0, 0, 0)"
                    ),
                    {"id": job_id, "request": request},
                )
        migrate(engine, "head")
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT id, leave_one_out FROM jobs")).all()
            assert {row.id: bool(row.leave_one_out) for row in rows} == {
                "loo": True,
                "plain": False,
            }
            indexes = {index["name"] for index in inspect(connection).get_indexes("groups")}
            assert "ix_groups_job_seq" in indexes
        migrate(engine, "0005", down=True)
        with engine.connect() as connection:
            columns = {column["name"] for column in inspect(connection).get_columns("jobs")}
            assert "leave_one_out" not in columns
            indexes = {index["name"] for index in inspect(connection).get_indexes("groups")}
            assert "ix_groups_job_seq" not in indexes
            assert connection.execute(text("SELECT count(*) FROM jobs")).scalar() == 2
        assert head_revision() == "0006"
    finally:
        engine.dispose()
