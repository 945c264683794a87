"""Reorder suggestions: bring each SKU back up to its target, in whole packs."""

from dataclasses import dataclass

from stock.ledger import Ledger
from stock.units import pack_size


@dataclass(frozen=True)
class Policy:
    reorder_point: int
    """Reorder when on hand + on order falls below this many pieces."""
    target: int
    """Order enough to reach at least this many pieces."""
    unit: str = "piece"
    """Suppliers sell in this unit only."""


def suggest(ledger: Ledger, policies: dict[str, Policy]) -> dict[str, int]:
    """SKU -> number of ``unit`` packs to order; SKUs that need nothing are left out."""
    orders = {}
    for sku, policy in sorted(policies.items()):
        available = ledger.available(sku)
        if available >= policy.reorder_point:
            continue
        size = pack_size(policy.unit)
        packs = (policy.target - available) // size
        if packs > 0:
            orders[sku] = packs
    return orders
