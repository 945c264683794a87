"""Builds /app/shop.db: a small, reproducible shop database."""

import random
import sqlite3
import sys

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, country TEXT NOT NULL);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers(id),
    ordered_at TEXT NOT NULL,  -- 'YYYY-MM-DD HH:MM:SS', UTC
    status TEXT NOT NULL       -- paid, cancelled or refunded, in any letter case
);
CREATE TABLE order_items (
    order_id INTEGER NOT NULL REFERENCES orders(id),
    sku TEXT NOT NULL,
    quantity INTEGER NOT NULL,
    unit_price_cents INTEGER NOT NULL
);
"""


def build(path: str, seed: int, orders: int) -> None:
    rng = random.Random(seed)
    db = sqlite3.connect(path)
    db.executescript(SCHEMA)
    countries = ["DE", "FR", "US", "JP"]
    db.executemany(
        "INSERT INTO customers VALUES (?, ?, ?)",
        [(i, f"customer {i}", rng.choice(countries)) for i in range(1, 21)],
    )
    skus = ["A-100", "A-200", "B-10", "C-7"]
    for order_id in range(1, orders + 1):
        month = rng.randint(1, 4)
        stamp = f"2024-{month:02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:15:00"
        status = rng.choice(["paid", "paid", "paid", "PAID", "Paid", "cancelled", "refunded"])
        db.execute(
            "INSERT INTO orders VALUES (?, ?, ?, ?)",
            (order_id, rng.randint(1, 20), stamp, status),
        )
        for _ in range(rng.choice([0, 1, 1, 2, 3])):
            db.execute(
                "INSERT INTO order_items VALUES (?, ?, ?, ?)",
                (order_id, rng.choice(skus), rng.randint(1, 5), rng.choice([250, 999, 1500])),
            )
    db.commit()
    db.close()


if __name__ == "__main__":
    build(sys.argv[1], seed=11, orders=120)
