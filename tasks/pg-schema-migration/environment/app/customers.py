"""Customer queries of the app, written for the schema with first_name and last_name."""

from __future__ import annotations

from typing import Any


def add_customer(conn: Any, first_name: str, last_name: str, email: str) -> int:
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO customers (first_name, last_name, email) VALUES (%s, %s, %s) RETURNING id",
            (first_name, last_name, email),
        )
        return int(cur.fetchone()[0])


def find_by_last_name(conn: Any, last_name: str) -> list[dict[str, Any]]:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT id, first_name, last_name, email FROM customers WHERE last_name = %s "
            "ORDER BY id",
            (last_name,),
        )
        columns = [c.name for c in cur.description]
        return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def directory(conn: Any) -> list[tuple[int, str, str]]:
    with conn.cursor() as cur:
        cur.execute("SELECT id, display_name, email FROM customer_directory ORDER BY id")
        return [tuple(row) for row in cur.fetchall()]
