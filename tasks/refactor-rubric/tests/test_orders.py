"""Hidden tests: summarize_orders must behave exactly as before the refactoring, and the
helpers the instruction asks for must exist and do their part."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, "/app")
import orders

# The original module, loaded by path so that no file the agent wrote can stand in for it.
_SPEC = importlib.util.spec_from_file_location(
    "reference_orders", Path(__file__).with_name("reference_orders.py")
)
assert _SPEC is not None
assert _SPEC.loader is not None
reference_orders = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference_orders)

SAMPLE = """\
# customer, sku, quantity, unit price, coupon
alice, A-1, 3, 19.99,
bob, B-7, 12, 5.00, bulk
alice, C-2, 1, 120.00, HALF
carol, A-1, 2, 4.50, tenoff
broken line
dave, , 1, 1.00,
erin, E-1, two, 3.00,
bob, B-8, 1, 0.99, unknown
"""


def random_document(rng: random.Random) -> str:
    names = ["alice", "bob", "carol", "dave", "erin", "frank"]
    coupons = ["", "HALF", "half", "TENOFF", "BULK", "bulk", "XMAS"]
    lines = []
    for _ in range(rng.randint(0, 25)):
        kind = rng.random()
        if kind < 0.08:
            lines.append(rng.choice(["", "   ", "# note", "nonsense", "a,b,c", ",x,1,1.0,"]))
            continue
        quantity = rng.choice([str(rng.randint(1, 30)), "0", "-2", "1.5"])
        price = rng.choice([f"{rng.uniform(0, 200):.2f}", "-1", "free", "0"])
        fields = [rng.choice(names), f"S-{rng.randint(1, 9)}", quantity, price, rng.choice(coupons)]
        lines.append(" , ".join(fields) if rng.random() < 0.3 else ",".join(fields))
    return "\n".join(lines)


def test_sample_matches_the_original():
    assert orders.summarize_orders(SAMPLE) == reference_orders.summarize_orders(SAMPLE)


def test_random_documents_match_the_original():
    rng = random.Random(20240611)
    for _ in range(400):
        text = random_document(rng)
        assert orders.summarize_orders(text) == reference_orders.summarize_orders(text), text


def test_empty_input_gives_a_zero_total():
    assert orders.summarize_orders("") == reference_orders.summarize_orders("")


def test_one_and_several_bad_lines_are_counted():
    for text in ("x\nalice,A,1,1.0,", "x\ny\nz"):
        assert orders.summarize_orders(text) == reference_orders.summarize_orders(text)


def test_customers_with_equal_amounts_are_sorted_by_name():
    text = "zoe,A,1,10.00,\namy,B,2,5.00,\nmia,C,1,10.00,"
    assert orders.summarize_orders(text) == reference_orders.summarize_orders(text)
    assert orders.summarize_orders(text).splitlines()[0].startswith("amy")


def test_parse_order_reads_and_normalizes_the_fields():
    assert tuple(orders.parse_order("  alice , A-1 , 3 , 2.50 , half ")) == (
        "alice",
        "A-1",
        3,
        2.5,
        "HALF",
    )


def test_parse_order_skips_blank_and_comment_lines():
    assert orders.parse_order("") is None
    assert orders.parse_order("   ") is None
    assert orders.parse_order("# alice, A, 1, 1.0,") is None


@pytest.mark.parametrize(
    "line",
    [
        "a,b,c",
        "alice,A,1,1.0,,extra",
        ",A,1,1.0,",
        "alice,,1,1.0,",
        "alice,A,x,1.0,",
        "alice,A,1,y,",
        "alice,A,0,1.0,",
        "alice,A,1,-0.5,",
    ],
)
def test_parse_order_rejects_malformed_lines(line):
    with pytest.raises(ValueError):  # noqa: PT011 - the message is unspecified
        orders.parse_order(line)


def test_line_total_applies_each_coupon():
    assert orders.line_total(3, 10.0, "") == 30.0
    assert orders.line_total(3, 10.0, "HALF") == 15.0
    assert orders.line_total(3, 10.0, "TENOFF") == 20.0
    assert orders.line_total(1, 4.0, "TENOFF") == 0
    assert orders.line_total(10, 1.0, "BULK") == 8.0
    assert orders.line_total(9, 1.0, "BULK") == 9.0
    assert orders.line_total(3, 10.0, "XMAS") == 30.0
    assert orders.line_total(3, 0.333, "") == 1.0


def test_format_money():
    assert orders.format_money(0) == "$0.00"
    assert orders.format_money(1234.5) == "$1,234.50"
    assert orders.format_money(1234567.891) == "$1,234,567.89"


def test_format_row_aligns_the_columns():
    assert orders.format_row("alice", 3, 59.97) == "alice           3 items       $59.97"
    assert orders.format_row("TOTAL", 120, 1234.5) == "TOTAL         120 items    $1,234.50"
