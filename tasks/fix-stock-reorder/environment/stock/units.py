"""Units of measure. Quantities are stored in base units (pieces)."""

PACK_SIZES = {"piece": 1, "pair": 2, "dozen": 12, "box": 24, "crate": 144}


def pack_size(unit: str) -> int:
    """Pieces in one ``unit``; unknown units are an error."""
    try:
        return PACK_SIZES[unit]
    except KeyError:
        raise ValueError(f"unknown unit {unit!r}") from None


def to_base(quantity: int, unit: str) -> int:
    return quantity * pack_size(unit)
