#!/usr/bin/env bash
# Reference solution: write /app/wc.py.
set -euo pipefail
cat > /app/wc.py <<'PY'
"""A simplified wc: count lines, words and bytes of files or standard input."""

import argparse
import sys
from typing import BinaryIO


def count(stream: BinaryIO) -> tuple[int, int, int]:
    data = stream.read()
    return data.count(b"\n"), len(data.split()), len(data)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="wc.py", description=__doc__)
    parser.add_argument("-l", action="store_true", help="print the line count")
    parser.add_argument("-w", action="store_true", help="print the word count")
    parser.add_argument("-c", action="store_true", help="print the byte count")
    parser.add_argument("files", nargs="*", metavar="FILE")
    args = parser.parse_args(argv)
    selected = [args.l, args.w, args.c]
    if not any(selected):
        selected = [True, True, True]

    def line(counts: tuple[int, ...], name: str | None) -> str:
        shown = [str(n) for n, keep in zip(counts, selected, strict=True) if keep]
        return " ".join(shown if name is None else [*shown, name])

    if not args.files:
        print(line(count(sys.stdin.buffer), None))
        return 0
    status = 0
    totals = (0, 0, 0)
    for name in args.files:
        try:
            if name == "-":
                counts = count(sys.stdin.buffer)
            else:
                with open(name, "rb") as stream:
                    counts = count(stream)
        except OSError as exc:
            print(f"wc.py: {name}: {exc.strerror}", file=sys.stderr)
            status = 2
            continue
        totals = tuple(a + b for a, b in zip(totals, counts, strict=True))
        print(line(counts, name))
    if len(args.files) > 1:
        print(line(totals, "total"))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
