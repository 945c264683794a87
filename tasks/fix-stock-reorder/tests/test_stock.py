import pytest
from stock.ledger import Ledger
from stock.reorder import Policy, suggest
from stock.units import pack_size, to_base


@pytest.mark.parametrize(
    ("unit", "size"),
    [
        ("piece", 1),
        ("pair", 2),
        ("dozen", 12),
        ("box", 24),
        ("crate", 144),
        ("Box", 24),
        (" CRATE ", 144),
        ("Dozen", 12),
    ],
)
def test_units_are_case_insensitive(unit, size):
    assert pack_size(unit) == size
    assert to_base(3, unit) == 3 * size


def test_unknown_unit_is_an_error():
    with pytest.raises(ValueError):  # noqa: PT011 (the message is not specified)
        pack_size("pallet")
    with pytest.raises(ValueError):  # noqa: PT011 (the message is not specified)
        Ledger().receive("a", 1, "pallet")


def test_receiving_clears_what_was_ordered_in_packs():
    ledger = Ledger()
    ledger.order("bolt", 2, "box")
    ledger.receive("bolt", 2, "box")
    assert ledger.on_hand["bolt"] == 48
    assert ledger.on_order.get("bolt", 0) == 0
    assert ledger.available("bolt") == 48


def test_partial_delivery_leaves_the_rest_on_order():
    ledger = Ledger()
    ledger.order("nut", 3, "dozen")
    ledger.receive("nut", 1, "Dozen")
    assert ledger.on_order["nut"] == 24
    assert ledger.available("nut") == 36


def test_over_delivery_never_makes_on_order_negative():
    ledger = Ledger()
    ledger.order("pin", 1, "pair")
    ledger.receive("pin", 1, "crate")
    assert ledger.on_order.get("pin", 0) == 0
    assert ledger.available("pin") == 144


def test_shipping():
    ledger = Ledger()
    ledger.receive("cap", 1, "box")
    ledger.ship("cap", 1, " Dozen")
    assert ledger.on_hand["cap"] == 12
    with pytest.raises(ValueError):  # noqa: PT011 (the message is not specified)
        ledger.ship("cap", 13)
    assert ledger.on_hand["cap"] == 12


def test_suggest_rounds_up_to_whole_packs():
    ledger = Ledger()
    ledger.receive("bolt", 10)
    assert suggest(ledger, {"bolt": Policy(reorder_point=20, target=60, unit="box")}) == {"bolt": 3}


def test_suggest_exact_multiple_is_not_rounded_up():
    ledger = Ledger()
    ledger.receive("nut", 12)
    assert suggest(ledger, {"nut": Policy(reorder_point=20, target=36, unit="dozen")}) == {"nut": 2}


def test_suggest_skips_skus_at_or_above_the_reorder_point():
    ledger = Ledger()
    ledger.receive("a", 20)
    ledger.order("b", 1, "box")
    policies = {
        "a": Policy(reorder_point=20, target=100),
        "b": Policy(reorder_point=24, target=100, unit="box"),
    }
    assert suggest(ledger, policies) == {}


def test_nightly_run_after_a_delivery_reorders():
    ledger = Ledger()
    ledger.order("washer", 5, "Box")
    ledger.receive("washer", 5, "box")
    ledger.ship("washer", 110)
    # 10 on hand, nothing on order: below 50, so order up to 200 in crates of 144.
    assert suggest(ledger, {"washer": Policy(reorder_point=50, target=200, unit="Crate")}) == {
        "washer": 2
    }


def test_unknown_sku_counts_as_empty():
    assert suggest(Ledger(), {"new": Policy(reorder_point=1, target=5, unit="pair")}) == {"new": 3}
