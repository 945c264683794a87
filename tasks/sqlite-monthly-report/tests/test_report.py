import random
import sqlite3
from pathlib import Path

import pytest

REPORT = Path("/app/report.sql")
COLUMNS = ["month", "country", "orders", "revenue_cents", "top_sku"]
SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL,
                     ordered_at TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL, sku TEXT NOT NULL, quantity INTEGER NOT NULL,
                          unit_price_cents INTEGER NOT NULL);
"""


def run_report(db: sqlite3.Connection) -> tuple[list[str], list[tuple]]:
    cursor = db.execute(REPORT.read_text())
    return [d[0] for d in cursor.description], cursor.fetchall()


def expected(db: sqlite3.Connection) -> list[tuple]:
    """An independent implementation of the report, in Python."""
    country = dict(db.execute("SELECT id, country FROM customers"))
    groups: dict[tuple[str, str], dict] = {}
    for order_id, customer, stamp, status in db.execute("SELECT * FROM orders"):
        if status.lower() != "paid":
            continue
        group = groups.setdefault((stamp[:7], country[customer]), {"orders": 0, "rev": 0, "q": {}})
        group["orders"] += 1
        for sku, quantity, price in db.execute(
            "SELECT sku, quantity, unit_price_cents FROM order_items WHERE order_id = ?",
            (order_id,),
        ):
            group["rev"] += quantity * price
            group["q"][sku] = group["q"].get(sku, 0) + quantity
    rows = []
    for (month, where), group in groups.items():
        top = min(group["q"], key=lambda s: (-group["q"][s], s)) if group["q"] else None
        rows.append((month, where, group["orders"], group["rev"], top))
    return sorted(rows, key=lambda r: (r[0], -r[3], r[1]))


def random_db(seed: int) -> sqlite3.Connection:
    rng = random.Random(seed)
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    countries = ["DE", "FR", "US", "JP", "BR", "IN"]
    for i in range(1, 31):
        db.execute("INSERT INTO customers VALUES (?, ?, ?)", (i, f"c{i}", rng.choice(countries)))
    for order_id in range(1, rng.randint(50, 200)):
        year = rng.choice([2023, 2024])
        day = f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        stamp = f"{day} 0{rng.randint(0, 9)}:00:00"
        status = rng.choice(["paid", "PAID", "Paid", "pAiD", "cancelled", "refunded", "Refunded"])
        db.execute(
            "INSERT INTO orders VALUES (?, ?, ?, ?)", (order_id, rng.randint(1, 30), stamp, status)
        )
        for _ in range(rng.choice([0, 0, 1, 2, 4])):
            db.execute(
                "INSERT INTO order_items VALUES (?, ?, ?, ?)",
                (
                    order_id,
                    rng.choice(["X1", "X2", "Y", "Z-9", "a"]),
                    rng.randint(1, 9),
                    rng.choice([1, 99, 1000, 2500]),
                ),
            )
    return db


def test_columns():
    names, _ = run_report(random_db(1))
    assert names == COLUMNS


def test_the_shop_database():
    db = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
    assert run_report(db)[1] == expected(db)


@pytest.mark.parametrize("seed", [2, 3, 4, 5, 6])
def test_other_databases(seed):
    db = random_db(seed)
    assert run_report(db)[1] == expected(db)


def test_ties_empty_orders_and_ordering():
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    db.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)", [(1, "a", "DE"), (2, "b", "FR"), (3, "c", "US")]
    )
    db.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?)",
        [
            (1, 1, "2024-01-05 10:00:00", "paid"),
            (2, 1, "2024-01-06 10:00:00", "PAID"),
            (3, 2, "2024-01-07 10:00:00", "paid"),
            (4, 3, "2024-01-31 23:59:59", "Paid"),
            (5, 3, "2024-02-01 00:00:00", "cancelled"),
            (6, 2, "2024-02-10 12:00:00", "paid"),
        ],
    )
    db.executemany(
        "INSERT INTO order_items VALUES (?, ?, ?, ?)",
        [
            (1, "B", 2, 100),
            (2, "A", 1, 100),
            (2, "A", 1, 100),  # DE: tie A=2, B=2 -> A
            (3, "Q", 1, 5000),  # FR: 5000, above DE's 400
            (5, "Z", 9, 9999),  # cancelled: ignored
        ],
    )
    _, rows = run_report(db)
    assert rows == [
        ("2024-01", "FR", 1, 5000, "Q"),
        ("2024-01", "DE", 2, 400, "A"),
        ("2024-01", "US", 1, 0, None),
        ("2024-02", "FR", 1, 0, None),
    ]


def test_nothing_paid_gives_no_rows():
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    db.execute("INSERT INTO customers VALUES (1, 'a', 'DE')")
    db.execute("INSERT INTO orders VALUES (1, 1, '2024-01-01 00:00:00', 'refunded')")
    assert run_report(db)[1] == []
