"""Hidden tests for the sales report: the expected figures are recomputed from pristine copies
of the input files shipped with the tests."""

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SCRIPT = Path("/app/report.py")
REPORT = Path("/app/out/report.json")


def expected_report(path: Path) -> dict:
    regions: dict[str, dict] = {}
    valid = skipped = 0
    with path.open(newline="") as stream:
        for row in csv.DictReader(stream):
            row = {key: value.strip() for key, value in row.items()}
            region = row["region"].lower()
            if not (
                region
                and re.fullmatch(r"-?\d+(\.\d+)?", row["amount"])
                and re.fullmatch(r"-?\d+", row["units"])
            ):
                skipped += 1
                continue
            valid += 1
            entry = regions.setdefault(region, {"orders": 0, "units": 0, "products": {}})
            entry["orders"] += 1
            entry["units"] += int(row["units"])
            products = entry["products"]
            products[row["product"]] = products.get(row["product"], 0) + float(row["amount"])
    for entry in regions.values():
        products = entry.pop("products")
        entry["revenue"] = sum(products.values())
        best = max(round(v, 6) for v in products.values())
        entry["top_product"] = min(p for p, v in products.items() if round(v, 6) == best)
    return {
        "regions": regions,
        "total_revenue": sum(entry["revenue"] for entry in regions.values()),
        "valid_rows": valid,
        "skipped_rows": skipped,
    }


def assert_matches(report: dict, expected: dict) -> None:
    assert set(report) == {"regions", "total_revenue", "valid_rows", "skipped_rows"}
    assert set(report["regions"]) == set(expected["regions"])
    for name, want in expected["regions"].items():
        got = report["regions"][name]
        assert set(got) == {"orders", "units", "revenue", "top_product"}, name
        assert (got["orders"], got["units"]) == (want["orders"], want["units"]), name
        assert got["revenue"] == pytest.approx(want["revenue"], abs=0.006), name
        assert got["revenue"] == round(got["revenue"], 2), name
        assert got["top_product"] == want["top_product"], name
    assert report["total_revenue"] == pytest.approx(expected["total_revenue"], abs=0.006)
    assert (report["valid_rows"], report["skipped_rows"]) == (
        expected["valid_rows"],
        expected["skipped_rows"],
    )


def run_script(*args: str) -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd="/"
    )
    assert result.returncode == 0, result.stderr


@pytest.fixture
def report() -> dict:
    return json.loads(REPORT.read_text())


def test_report_has_the_expected_shape(report):
    assert set(report) == {"regions", "total_revenue", "valid_rows", "skipped_rows"}
    assert all(type(report[key]) is int for key in ("valid_rows", "skipped_rows"))
    for entry in report["regions"].values():
        assert type(entry["orders"]) is int
        assert type(entry["units"]) is int
        assert isinstance(entry["revenue"], float | int)


def test_dirty_rows_are_skipped(report):
    assert (report["valid_rows"], report["skipped_rows"]) == (43, 5)


def test_regions_are_normalised(report):
    assert sorted(report["regions"]) == ["east", "north", "south", "west"]


def test_orders_and_units_per_region(report):
    expected = expected_report(DATA / "sales.csv")["regions"]
    for name, want in expected.items():
        got = report["regions"][name]
        assert (got["orders"], got["units"]) == (want["orders"], want["units"]), name


def test_revenue_per_region_and_total(report):
    expected = expected_report(DATA / "sales.csv")
    for name, want in expected["regions"].items():
        assert report["regions"][name]["revenue"] == pytest.approx(want["revenue"], abs=0.006), name
    assert report["total_revenue"] == pytest.approx(expected["total_revenue"], abs=0.006)


def test_top_products(report):
    expected = expected_report(DATA / "sales.csv")["regions"]
    got = {name: entry["top_product"] for name, entry in report["regions"].items()}
    assert got == {name: entry["top_product"] for name, entry in expected.items()}


def test_whole_report_and_input_untouched(report):
    assert_matches(report, expected_report(DATA / "sales.csv"))
    assert Path("/app/data/sales.csv").read_bytes() == (DATA / "sales.csv").read_bytes()


def test_script_defaults_reproduce_the_report(tmp_path):
    REPORT.unlink(missing_ok=True)
    run_script()
    assert_matches(json.loads(REPORT.read_text()), expected_report(DATA / "sales.csv"))


def test_script_on_another_file(tmp_path):
    out = tmp_path / "nested" / "dir" / "report.json"
    run_script("--input", str(DATA / "sales_extra.csv"), "--output", str(out))
    report = json.loads(out.read_text())
    assert_matches(report, expected_report(DATA / "sales_extra.csv"))
    assert report["regions"]["coast"]["top_product"] == "Alpha"
    assert report["regions"]["central"]["top_product"] == 'Widget "XL", blue'
    assert report["regions"]["central"]["units"] == 5
    assert report["total_revenue"] == pytest.approx(69.5, abs=0.006)
    assert (report["valid_rows"], report["skipped_rows"]) == (8, 4)
