"""Order summaries for the billing team.

An order line is ``customer, sku, quantity, unit price, coupon``; the summary has one row per
customer (largest amount first), a TOTAL row and, when some lines were unreadable, how many.
"""

from __future__ import annotations

from typing import NamedTuple

LABEL_WIDTH = 12
ITEMS_WIDTH = 5
MONEY_WIDTH = 12


class Order(NamedTuple):
    customer: str
    sku: str
    quantity: int
    unit_price: float
    coupon: str


def parse_order(line: str) -> Order | None:
    """The order on ``line``; None for a blank or comment line; ValueError when malformed."""
    line = line.strip()
    if not line or line.startswith("#"):
        return None
    parts = [part.strip() for part in line.split(",")]
    if len(parts) != 5:
        raise ValueError(f"expected 5 comma-separated fields, got {len(parts)}")
    customer, sku, quantity_text, price_text, coupon = parts
    if not customer or not sku:
        raise ValueError("customer and sku must not be empty")
    quantity, unit_price = int(quantity_text), float(price_text)
    if quantity <= 0 or unit_price < 0:
        raise ValueError("quantity must be positive and the unit price not negative")
    return Order(customer, sku, quantity, unit_price, coupon.upper())


def line_total(quantity: int, unit_price: float, coupon: str) -> float:
    """What the line costs after its coupon, rounded to cents; unknown coupons do nothing."""
    total = quantity * unit_price
    if coupon == "HALF":
        total -= total * 0.5
    elif coupon == "TENOFF":
        total = max(total - 10, 0)
    elif coupon == "BULK" and quantity >= 10:
        total -= total * 0.2
    return round(total, 2)


def format_money(amount: float) -> str:
    """``1234.5`` -> ``$1,234.50``."""
    return "$" + format(round(amount, 2), ",.2f")


def format_row(label: str, items: int, amount: float) -> str:
    """One aligned row of the summary."""
    money = format_money(amount).rjust(MONEY_WIDTH)
    return f"{label.ljust(LABEL_WIDTH)}{str(items).rjust(ITEMS_WIDTH)} items {money}"


def summarize_orders(text: str) -> str:
    """The per-customer summary of the order lines in ``text``."""
    totals: dict[str, list[float]] = {}
    skipped = 0
    for raw in text.splitlines():
        try:
            order = parse_order(raw)
        except ValueError:
            skipped += 1
            continue
        if order is None:
            continue
        items_and_amount = totals.setdefault(order.customer, [0, 0.0])
        items_and_amount[0] += order.quantity
        items_and_amount[1] += line_total(order.quantity, order.unit_price, order.coupon)
    rows = []
    grand_items, grand_amount = 0, 0.0
    for customer in sorted(totals, key=lambda name: (-totals[name][1], name)):
        items, amount = int(totals[customer][0]), totals[customer][1]
        grand_items += items
        grand_amount += amount
        rows.append(format_row(customer, items, amount))
    rows.append(format_row("TOTAL", grand_items, grand_amount))
    if skipped:
        rows.append(f"skipped {skipped} bad line{'' if skipped == 1 else 's'}")
    return "\n".join(rows)
