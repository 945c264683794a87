"""Stock movements per SKU, in base units."""

from dataclasses import dataclass, field

from stock.units import to_base


@dataclass
class Ledger:
    on_hand: dict[str, int] = field(default_factory=dict)
    on_order: dict[str, int] = field(default_factory=dict)

    def receive(self, sku: str, quantity: int, unit: str = "piece") -> None:
        """Goods arrived: on hand grows, and what was on order for the SKU shrinks."""
        pieces = to_base(quantity, unit)
        self.on_hand[sku] = self.on_hand.get(sku, 0) + pieces
        self.on_order[sku] = max(0, self.on_order.get(sku, 0) - pieces)

    def ship(self, sku: str, quantity: int, unit: str = "piece") -> None:
        pieces = to_base(quantity, unit)
        if pieces > self.on_hand.get(sku, 0):
            raise ValueError(f"cannot ship {pieces} of {sku}: only {self.on_hand.get(sku, 0)}")
        self.on_hand[sku] -= pieces

    def order(self, sku: str, quantity: int, unit: str = "piece") -> None:
        self.on_order[sku] = self.on_order.get(sku, 0) + to_base(quantity, unit)

    def available(self, sku: str) -> int:
        """On hand plus on order, in pieces."""
        return self.on_hand.get(sku, 0) + self.on_order.get(sku, 0)
