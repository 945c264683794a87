"""Summarise a sales CSV export per region into a JSON report."""

import argparse
import csv
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

AMOUNT = re.compile(r"-?(\d+(\.\d*)?|\.\d+)")
UNITS = re.compile(r"[+-]?\d+")


def summarise(rows: list[dict[str, str]]) -> dict[str, object]:
    orders: dict[str, int] = defaultdict(int)
    units: dict[str, int] = defaultdict(int)
    revenue: dict[str, Decimal] = defaultdict(Decimal)
    by_product: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    skipped = 0
    for raw in rows:
        row = {key: (value or "").strip() for key, value in raw.items() if key is not None}
        region, product = row.get("region", "").lower(), row.get("product", "")
        amount, count = row.get("amount", ""), row.get("units", "")
        if not region or not AMOUNT.fullmatch(amount) or not UNITS.fullmatch(count):
            skipped += 1
            continue
        orders[region] += 1
        units[region] += int(count)
        revenue[region] += Decimal(amount)
        by_product[region][product] += Decimal(amount)
    regions = {
        region: {
            "orders": orders[region],
            "units": units[region],
            "revenue": round(float(revenue[region]), 2),
            "top_product": min(by_product[region].items(), key=lambda kv: (-kv[1], kv[0]))[0],
        }
        for region in sorted(orders)
    }
    return {
        "regions": regions,
        "total_revenue": round(float(sum(revenue.values(), Decimal())), 2),
        "valid_rows": sum(orders.values()),
        "skipped_rows": skipped,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", type=Path, default=Path("/app/data/sales.csv"))
    parser.add_argument("--output", type=Path, default=Path("/app/out/report.json"))
    args = parser.parse_args()
    with args.input.open(newline="", encoding="utf-8") as stream:
        report = summarise(list(csv.DictReader(stream)))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
