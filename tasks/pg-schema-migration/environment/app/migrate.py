"""Apply the pending migrations of /app/migrations (*.sql, in name order), one transaction
each, recording every applied one in schema_migrations. `--status` lists them instead."""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg2

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def main() -> int:
    conn = psycopg2.connect("")  # libpq reads PGHOST, PGUSER, PGPASSWORD, PGDATABASE
    with conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur.execute("SELECT version FROM schema_migrations")
        applied = {row[0] for row in cur.fetchall()}
    for path in sorted(MIGRATIONS.glob("*.sql")):
        version = path.stem
        if "--status" in sys.argv:
            print(f"{'applied' if version in applied else 'pending'}  {version}")
            continue
        if version in applied:
            continue
        with conn, conn.cursor() as cur:
            cur.execute(path.read_text())
            cur.execute("INSERT INTO schema_migrations (version) VALUES (%s)", (version,))
        print(f"applied {version}")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
