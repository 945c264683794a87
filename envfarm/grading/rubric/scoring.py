"""Reading a judge's verdict and combining rubric scores with the test reward.

A verdict is asked for as ``{"score": <0..scale>, "reason": "..."}`` but judges wander, so the
reader accepts, in order: the whole reply as JSON; JSON in a code fence; the first JSON object
with a ``score`` key anywhere in the text; then plain text (``score: 7/10``, ``Score = 0.8``,
``80%``, a lone ``7/10`` or ``7 out of 10``). An explicit fraction or percentage is normalized by
its own denominator; a bare number by the item's ``scale``. Scores outside ``[0, scale]`` (beyond
float noise, which is clamped), NaN, infinities, booleans and disagreeing scores in one reply are
refused: the caller then asks again. Every refusal is a ``GradingError`` naming the problem.

The final reward is the weighted mean of the test reward (weight ``tests_weight``) and the item
scores (their weights). Items the tests gated out (``min_tests_reward``) count with score 0.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from envfarm.errors import GradingError
from envfarm.models.trajectory import Reward
from envfarm.spec.config import RubricItem, RubricScoring

_EPSILON = 1e-9
_NUMBER = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf(?:inity)?)(?![a-z])"
_FRACTION = rf"(?P<num>{_NUMBER})\s*(?:/|out\s+of)\s*(?P<den>{_NUMBER})"
_SCORE_SAYS = re.compile(
    rf"\bscore\b[\s*:=]*(?:is\s+)?(?:(?:{_FRACTION})|(?P<pct>{_NUMBER})\s*%|(?P<bare>{_NUMBER}))",
    re.IGNORECASE,
)
_LONE_FRACTION = re.compile(rf"(?<![\w.]){_FRACTION}(?!\w|\.\d)", re.IGNORECASE)
_LONE_NUMBER = re.compile(rf"(?P<bare>{_NUMBER})", re.IGNORECASE)
_FENCE = re.compile(r"```[a-zA-Z]*\s*\n?(.*?)```", re.DOTALL)

COMPONENT_TESTS = "tests:reward"
COMPONENT_PREFIX = "rubric:"
FLAG_UNJUDGED = "rubric:unjudged"
FLAG_GATED = "rubric:gated"


@dataclass(frozen=True)
class Verdict:
    score: float
    """Normalized to 0..1."""
    raw: str
    """The score as written (``0.8``, ``7/10``, ``80%``)."""
    reason: str


def parse_verdict(text: str | None, scale: float) -> Verdict:
    """The verdict in ``text`` for an item scored from 0 to ``scale``, or GradingError."""
    if text is None or not text.strip():
        raise GradingError("the reply is empty")
    found = _from_json(text, scale)
    return found if found is not None else _from_text(text, scale)


def _from_json(text: str, scale: float) -> Verdict | None:
    for candidate in _json_objects(text):
        if not isinstance(candidate, dict):
            continue
        keys = {str(k).lower(): v for k, v in candidate.items()}
        if "score" not in keys:
            continue
        raw_reason = keys.get("reason", keys.get("explanation", ""))
        reason = raw_reason if isinstance(raw_reason, str) else json.dumps(raw_reason)
        value = keys["score"]
        if isinstance(value, str):
            found = _from_text(f"score: {value}", scale)
            return Verdict(found.score, found.raw, reason)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise GradingError(f'"score" must be a number, got {json.dumps(value)}')
        raw = json.dumps(value)
        return Verdict(_normalize(float(value), scale, raw), raw, reason)
    return None


def _json_objects(text: str) -> list[object]:
    """JSON values in ``text``: the whole text, then fenced blocks, then each ``{...}`` found."""
    found: list[object] = []
    blocks = [text.strip(), *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for block in blocks:
        try:
            found.append(json.loads(block))
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        found.append(value)
    return found


def _from_text(text: str, scale: float) -> Verdict:
    verdicts = [_verdict_of(m, scale) for m in _SCORE_SAYS.finditer(text)]
    if not verdicts:
        verdicts = [_verdict_of(m, scale) for m in _LONE_FRACTION.finditer(text)]
    lone = _LONE_NUMBER.fullmatch(text.strip())
    if not verdicts and lone is not None:
        verdicts = [_verdict_of(lone, scale)]
    if not verdicts:
        raise GradingError(
            'no verdict found: expected a JSON object {"score": <number>, "reason": <text>}'
        )
    if len({v.score for v in verdicts}) > 1:
        said = ", ".join(v.raw for v in verdicts)
        raise GradingError(f"the reply gives different scores ({said})")
    return Verdict(verdicts[0].score, verdicts[0].raw, text.strip())


def _verdict_of(match: re.Match[str], scale: float) -> Verdict:
    groups = match.groupdict()
    if groups.get("num") is not None:
        numerator, denominator = float(groups["num"]), float(groups["den"])
        raw = f"{groups['num']}/{groups['den']}"
        if not math.isfinite(denominator) or denominator <= 0:
            raise GradingError(f"score {raw} has no positive denominator")
        return Verdict(_normalize(numerator, denominator, raw), raw, "")
    if groups.get("pct") is not None:
        raw = f"{groups['pct']}%"
        return Verdict(_normalize(float(groups["pct"]), 100.0, raw), raw, "")
    raw = groups["bare"]
    return Verdict(_normalize(float(raw), scale, raw), raw, "")


def _normalize(value: float, scale: float, raw: str) -> float:
    if not math.isfinite(value):
        raise GradingError(f"score {raw} is not a finite number")
    if value < -_EPSILON * scale or value > scale * (1 + _EPSILON):
        raise GradingError(f"score {raw} is outside 0..{scale:g}")
    return min(1.0, max(0.0, value / scale))


def combine(
    tests: Reward,
    scoring: RubricScoring,
    items: list[RubricItem],
    scores: dict[str, float],
    flags: list[str] | None = None,
) -> Reward:
    """``(tests_weight * tests + sum(weight_i * score_i)) / (tests_weight + sum(weight_i))``.

    ``tests`` must be valid; an item missing from ``scores`` counts as 0 (gated out).
    """
    if not tests.valid or tests.value is None:
        raise GradingError("rubric scores cannot be combined with an invalid test reward")
    total = scoring.tests_weight + sum(item.weight for item in items)
    weighted = scoring.tests_weight * tests.value
    weighted += sum(item.weight * scores.get(item.name, 0.0) for item in items)
    components = dict(tests.components)
    components[COMPONENT_TESTS] = tests.value
    components.update({COMPONENT_PREFIX + i.name: scores.get(i.name, 0.0) for i in items})
    judged = sum(1 for item in items if item.name in scores)
    return Reward(
        value=weighted / total,
        valid=True,
        components=components,
        flags=[*tests.flags, *(flag for flag in flags or [] if flag not in tests.flags)],
        reason=f"{tests.reason or 'tests'} + rubric ({judged} of {len(items)} items judged)",
    )
