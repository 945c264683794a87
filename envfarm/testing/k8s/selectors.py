"""Label and field selectors in the API server's string syntax, parsed once and matched.

Labels: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x,y)``, ``a`` (exists),
``!a`` (does not exist), comma-separated and all required. Fields: ``path=value`` and
``path!=value`` over dotted paths (``metadata.name``, ``status.phase``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from envfarm.errors import KubeInvalid
from envfarm.k8s.api import KubeObject
from envfarm.k8s.objects import get_path

_SET = re.compile(r"^\s*([^\s!=,()]+)\s+(in|notin)\s+\(([^)]*)\)\s*")
_EQUALITY = re.compile(r"^\s*([^\s!=,()]+)\s*(==|=|!=)\s*([^\s,()]*)\s*")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=,()]+)\s*")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """``in``, ``notin``, ``exists`` or ``!exists`` (equality is ``in``/``notin`` of one)."""
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return LabelSelector()
    rest, found = text, []
    while rest.strip():
        if match := _SET.match(rest):
            values = frozenset(v.strip() for v in match.group(3).split(",") if v.strip())
            found.append(Requirement(match.group(1), match.group(2), values))
        elif match := _EQUALITY.match(rest):
            operator = "notin" if match.group(2) == "!=" else "in"
            found.append(Requirement(match.group(1), operator, frozenset({match.group(3)})))
        elif match := _EXISTS.match(rest):
            found.append(Requirement(match.group(2), "!exists" if match.group(1) else "exists"))
        else:
            raise KubeInvalid(f"label selector {text!r}: cannot parse {rest.strip()!r}", status=400)
        rest = rest[match.end() :]
        if rest.strip() and not rest.lstrip().startswith(","):
            raise KubeInvalid(
                f"label selector {text!r}: expected ',' before {rest.strip()!r}", status=400
            )
        rest = rest.lstrip().removeprefix(",")
    return LabelSelector(tuple(found))


def selector_from_labels(labels: Mapping[str, str]) -> str:
    """``{"a": "b", "c": "d"}`` -> ``a=b,c=d`` (sorted)."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


@dataclass(frozen=True)
class FieldSelector:
    terms: tuple[tuple[str, bool, str], ...] = ()
    """(dotted path, equal?, value)."""

    def matches(self, obj: KubeObject) -> bool:
        for path, equal, value in self.terms:
            actual = get_path(obj, path)
            text = str(actual) if actual is not None else ""
            if (text == value) != equal:
                return False
        return True


def parse_field_selector(text: str | None) -> FieldSelector:
    if not text or not text.strip():
        return FieldSelector()
    terms = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(\S*)\s*", part)
        if match is None:
            raise KubeInvalid(f"field selector {text!r}: cannot parse {part!r}", status=400)
        terms.append((match.group(1), match.group(2) != "!=", match.group(3)))
    return FieldSelector(tuple(terms))
