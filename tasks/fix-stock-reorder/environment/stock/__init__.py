"""stock: a tiny inventory ledger with reorder suggestions."""
