"""Grade the migration by querying the database: the live one the agent migrated, and a scratch
copy of the old schema (with other rows) on which the migration file is replayed."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import psycopg2.errors
import pytest

sys.path.insert(0, "/app")
import customers

MIGRATION = Path("/app/migrations/002_split_customer_name.sql")
OLD_SCHEMA = Path(__file__).parent / "data" / "001_create_customers.sql"
SEEDED = {
    "ada@example.com": ("Ada", "Lovelace"),
    "grace@example.com": ("Grace Brewster Murray", "Hopper"),
    "alan@example.com": ("Alan", "Turing"),
    "cher@example.com": ("Cher", ""),
    "anonymous@example.com": ("", ""),
    "blank@example.com": ("", ""),
    "picard@example.com": ("Jean-Luc", "Picard"),
    "eliot@example.com": ("Mary Ann", "Evans"),
}
EXTRA = {
    "solo@example.com": ("  Solo  ", ("Solo", "")),
    "anne@example.com": ("  Anne  Marie   Smith-Jones  ", ("Anne Marie", "Smith-Jones")),
    "nobody@example.com": (None, ("", "")),
    "empty@example.com": ("", ("", "")),
    "zoe@example.com": ("Zoë\n Ölund\r\n", ("Zoë", "Ölund")),
    "many@example.com": ("a b c d e", ("a b c d", "e")),
}


def split(name: str | None) -> tuple[str, str]:
    words = re.sub(r"\s+", " ", name or "").strip().split(" ")
    words = [w for w in words if w]
    if len(words) <= 1:
        return (words[0] if words else "", "")
    return (" ".join(words[:-1]), words[-1])


@pytest.fixture
def conn() -> Iterator[psycopg2.extensions.connection]:
    connection = psycopg2.connect("")
    yield connection
    connection.rollback()
    connection.close()


def rows(conn, sql: str, args: tuple = ()) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchall()


def columns(conn) -> dict[str, tuple[str, str, str | None]]:
    found = rows(
        conn,
        "SELECT column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_name = 'customers'",
    )
    return {name: (kind, nullable, default) for name, kind, nullable, default in found}


def test_the_migration_file_exists_and_is_recorded_as_applied(conn) -> None:
    assert MIGRATION.is_file()
    versions = [v for (v,) in rows(conn, "SELECT version FROM schema_migrations ORDER BY 1")]
    assert versions == ["001_create_customers", "002_split_customer_name"]


def test_columns_and_constraints(conn) -> None:
    found = columns(conn)
    assert "name" not in found
    assert found["first_name"][:2] == ("text", "NO")
    assert found["last_name"][:2] == ("text", "NO")
    assert found["first_name"][2] is None
    assert "''" in (found["last_name"][2] or "")


def test_existing_rows_are_backfilled(conn) -> None:
    found = rows(conn, "SELECT email, first_name, last_name FROM customers")
    assert {email: (first, last) for email, first, last in found} == SEEDED


def test_not_null_is_enforced_and_last_name_defaults_to_empty(conn) -> None:
    with pytest.raises(psycopg2.errors.NotNullViolation), conn.cursor() as cur:
        cur.execute("INSERT INTO customers (last_name, email) VALUES ('X', 'x@example.com')")
    conn.rollback()
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO customers (first_name, email) VALUES ('Prince', 'prince@example.com') "
            "RETURNING last_name"
        )
        assert cur.fetchone() == ("",)
    conn.rollback()


def test_the_view_shows_full_names(conn) -> None:
    found = {email: name for _, name, email in customers.directory(conn)}
    expected = {email: " ".join(p for p in parts if p) for email, parts in SEEDED.items()}
    assert found == expected


def test_the_app_works_on_the_new_schema(conn) -> None:
    new_id = customers.add_customer(conn, "Katherine", "Johnson", "katherine@example.com")
    found = customers.find_by_last_name(conn, "Johnson")
    assert [(c["id"], c["first_name"]) for c in found] == [(new_id, "Katherine")]
    assert customers.find_by_last_name(conn, "Turing")[0]["first_name"] == "Alan"


@pytest.fixture
def scratch() -> Iterator[psycopg2.extensions.connection]:
    name = f"replay_{os.getpid()}"
    admin = psycopg2.connect("")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
        cur.execute(f"CREATE DATABASE {name}")
    connection = psycopg2.connect(dbname=name)
    try:
        yield connection
    finally:
        connection.close()
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.close()


def test_the_migration_replays_on_other_data(scratch) -> None:
    with scratch, scratch.cursor() as cur:
        cur.execute(OLD_SCHEMA.read_text())
        for email, (name, _) in EXTRA.items():
            cur.execute("INSERT INTO customers (name, email) VALUES (%s, %s)", (name, email))
    with scratch, scratch.cursor() as cur:
        cur.execute(MIGRATION.read_text())
    found = rows(scratch, "SELECT email, first_name, last_name FROM customers")
    expected = {**SEEDED, **{email: parts for email, (_, parts) in EXTRA.items()}}
    assert {email: (first, last) for email, first, last in found} == expected
    for email, (name, parts) in EXTRA.items():
        assert split(name) == parts, email
    assert "name" not in columns(scratch)
