"""The logical instructions of a Dockerfile with their physical line spans, heredocs included.

A ``RUN``, ``COPY`` or ``ADD`` whose line names a heredoc (``<<EOF``, ``<<-EOF``, ``<<'EOF'``)
spans the heredoc's body up to its terminator, as BuildKit's parser reads it: the body is never
read as instructions (a ``from x import y`` in a Python heredoc is no ``FROM``).

``Source`` is a Dockerfile being rewritten for the classic builder, each line remembering the
line of the task's own Dockerfile it came from, so that a build error quotes the task's line and
never envfarm's rewrite of it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

HEREDOC_KEYWORDS = ("RUN", "COPY", "ADD")
_HEREDOC = re.compile(r"^(\d*)<<(-?)([^<]+)$")


class Heredoc(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    chomp: bool
    """``<<-``: leading tabs are stripped from the body and the terminator."""
    quoted: bool
    body: str
    """Every line up to the terminator, each ending in a newline."""


class Instruction(BaseModel):
    model_config = ConfigDict(extra="forbid")

    first: int
    last: int
    keyword: str
    args: str
    """The instruction's own line(s), joined; without the heredoc bodies."""
    heredocs: list[Heredoc] = []


def _words(line: str) -> list[str]:
    """Whitespace-separated words, quotes kept, as BuildKit splits a line to find heredocs."""
    words, word, quote = [], "", ""
    for char in line:
        if quote:
            word += char
            if char == quote:
                quote = ""
        elif char in "'\"":
            word, quote = word + char, char
        elif char.isspace():
            if word:
                words.append(word)
            word = ""
        else:
            word += char
    return [*words, word] if word else words


def heredoc_names(line: str) -> list[tuple[str, bool, bool]]:
    """(name, chomp, quoted) of every heredoc an instruction line opens."""
    found = []
    for word in _words(line):
        match = _HEREDOC.match(word)
        if match is None:
            continue
        raw = match.group(3)
        name = re.sub(r"""['"]""", "", raw)
        if name:
            found.append((name, match.group(2) == "-", name != raw))
    return found


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
        if not joined or joined.startswith("#"):
            continue
        keyword, _, args = joined.partition(" ")
        heredocs: list[Heredoc] = []
        if keyword.upper() in HEREDOC_KEYWORDS and "<<" in args:
            for name, chomp, quoted in heredoc_names(args):
                body = []
                while index < len(lines):
                    line = lines[index].rstrip("\r")
                    index += 1
                    if (line.lstrip("\t") if chomp else line) == name:
                        break
                    body.append(line + "\n")
                heredocs.append(Heredoc(name=name, chomp=chomp, quoted=quoted, body="".join(body)))
        found.append(
            Instruction(
                first=first,
                last=index - 1,
                keyword=keyword.upper(),
                args=args,
                heredocs=heredocs,
            )
        )
    return found


class Source(BaseModel):
    """A Dockerfile's lines, each with the index of the task's own line it came from."""

    model_config = ConfigDict(extra="forbid")

    original: str
    lines: list[str]
    origins: list[int]

    @classmethod
    def of(cls, text: str) -> Source:
        lines = text.split("\n")
        return cls(original=text, lines=lines, origins=list(range(len(lines))))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def splice(self, first: int, last: int, new: list[str]) -> None:
        """Replace lines ``first..last`` by ``new``, which come from the line ``first`` did."""
        origin = self.origins[first]
        self.lines[first : last + 1] = new
        self.origins[first : last + 1] = [origin] * len(new)

    def steps(self) -> list[str]:
        """For each instruction as the classic builder numbers its steps, the task's own
        instruction it came from: ``line 7: RUN pip install ...``."""
        own = {inst.first: inst for inst in instructions(self.original)}
        original_lines = self.original.split("\n")
        quoted = []
        for inst in instructions(self.text):
            origin = self.origins[inst.first]
            source = own.get(origin)
            text = original_lines[origin].strip()
            if source is not None and source.last > source.first:
                text += " ..."
            quoted.append(f"line {origin + 1}: {text[:300]}")
        return quoted
