"""Reading the verifier's reward files (the Harbor contract).

``reward.json`` wins over ``reward.txt``. In ``reward.json`` the reward is the ``reward`` key;
without one, the only value; otherwise the mean of the values. Every key is kept as a component.
``reward.txt`` holds one number. Anything else (empty, not a number, NaN or infinite, booleans)
is a ``GradingError``: the reward is invalid, never silently 0.
"""

from __future__ import annotations

import json
import math

from envfarm.errors import GradingError
from envfarm.models.trajectory import Reward


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise GradingError(f"{where} must be a number, got {json.dumps(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise GradingError(f"{where} must be finite, got {number}")
    return number


def parse_reward_json(text: str) -> Reward:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GradingError(f"reward.json is not valid JSON: {exc.msg} at char {exc.pos}") from exc
    if not isinstance(data, dict):
        value = _number(data, "reward.json")
        return Reward(value=value, valid=True, components={"reward": value}, reason="reward.json")
    if not data:
        raise GradingError("reward.json is an empty object")
    components = {key: _number(value, f"reward.json key {key!r}") for key, value in data.items()}
    if "reward" in components:
        value = components["reward"]
    elif len(components) == 1:
        value = next(iter(components.values()))
    else:
        value = sum(components.values()) / len(components)
    return Reward(value=value, valid=True, components=components, reason="reward.json")


def parse_reward_txt(text: str) -> Reward:
    stripped = text.strip()
    if not stripped:
        raise GradingError("reward.txt is empty")
    try:
        value = _number(float(stripped), "reward.txt")
    except ValueError as exc:
        raise GradingError(f"reward.txt must hold one number, got {stripped[:80]!r}") from exc
    return Reward(value=value, valid=True, components={"reward": value}, reason="reward.txt")
