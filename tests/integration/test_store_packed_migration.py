"""Migration 0005 on a real SQLite file and a real PostgreSQL: the packed copies a store kept
in ``trajectories.packed`` move to ``packed_trajectories`` and back, none lost."""

from __future__ import annotations

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from envfarm.store.engine import normalize_url, open_engine
from tests.store_fixtures import migrate

ROWS = [("t1", '{"a":[1,2]}', '{"a":"AQAAAAIAAAA="}'), ("t2", '{"a":[]}', None)]


def packed_copies(connection: Connection) -> dict[str, str]:
    rows = connection.execute(text("SELECT trajectory_id, packed FROM packed_trajectories"))
    return {row.trajectory_id: row.packed for row in rows}


def test_packed_copies_move_to_their_own_table_and_back(db_url: str) -> None:
    engine = open_engine(normalize_url(db_url))
    try:
        migrate(engine, "0004")
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO jobs (id, status, priority, stale_policy, max_retries, request,"
                " last_cursor, created_at, updated_at) VALUES ('j', 'completed', 0, 'mark', 0,"
                " '{}', 1, 0, 0)"
            ))  # fmt: skip
            connection.execute(text(
                "INSERT INTO groups (id, job_id, task_id, task_hash, seq, state, stale)"
                " VALUES ('g', 'j', 't', 'h', 0, 'completed', false)"
            ))  # fmt: skip
            for index, (trajectory_id, data, packed) in enumerate(ROWS):
                connection.execute(
                    text(
                        'INSERT INTO episodes (id, job_id, group_id, task_id, "index", seq,'
                        " state, attempt) VALUES (:id, 'j', 'g', 't', :i, :i, 'done', 0)"
                    ),
                    {"id": trajectory_id, "i": index},
                )
                connection.execute(
                    text(
                        "INSERT INTO trajectories (trajectory_id, episode_id, group_id, job_id,"
                        " data, packed) VALUES (:id, :id, 'g', 'j', :data, :packed)"
                    ),
                    {"id": trajectory_id, "data": data, "packed": packed},
                )
        migrate(engine, "head")
        with engine.connect() as connection:
            assert packed_copies(connection) == {"t1": ROWS[0][2]}
            columns = {c["name"] for c in inspect(connection).get_columns("trajectories")}
            assert "packed" not in columns
            query = text("SELECT data FROM trajectories ORDER BY trajectory_id")
            assert list(connection.execute(query).scalars()) == [row[1] for row in ROWS]
        migrate(engine, "0004", down=True)
        with engine.connect() as connection:
            back = connection.execute(
                text("SELECT trajectory_id, packed FROM trajectories ORDER BY trajectory_id")
            ).all()
            assert [tuple(row) for row in back] == [(tid, packed) for tid, _, packed in ROWS]
            assert not inspect(connection).has_table("packed_trajectories")
        migrate(engine, "head")
        with engine.connect() as connection:
            assert packed_copies(connection) == {"t1": ROWS[0][2]}
    finally:
        engine.dispose()
