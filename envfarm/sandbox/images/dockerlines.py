"""The logical instructions of a Dockerfile with their physical line spans."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Instruction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    first: int
    last: int
    keyword: str
    args: str


def instructions(text: str) -> list[Instruction]:
    """Logical instructions with their physical line span (``\\`` continuations joined)."""
    lines = text.split("\n")
    found: list[Instruction] = []
    index = 0
    while index < len(lines):
        first, parts = index, list[str]()
        while index < len(lines):
            line = lines[index]
            index += 1
            if parts and line.lstrip().startswith("#"):
                continue
            if line.rstrip().endswith("\\"):
                parts.append(line.rstrip()[:-1])
                continue
            parts.append(line)
            break
        joined = " ".join(parts).strip()
        if joined and not joined.startswith("#"):
            keyword, _, args = joined.partition(" ")
            found.append(
                Instruction(first=first, last=index - 1, keyword=keyword.upper(), args=args)
            )
    return found
