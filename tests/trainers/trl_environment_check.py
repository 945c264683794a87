"""The tools TRL's GRPOTrainer would offer for ``EnvfarmEnvironment``; run in TRL's virtualenv.

``python trl_environment_check.py`` prints one JSON report: the methods TRL's trainer takes as
tools (its own selection: the class's public functions but ``reset`` and ``get_reward``), and
the JSON schema transformers renders for each (what the chat template shows the model).
tests/unit/test_trainer_trl.py compares them with the step API's own tool schemas.
"""

from __future__ import annotations

import inspect
import json

import trl
from transformers.utils import get_json_schema

from envfarm.integrations.trl_environment import EnvfarmEnvironment


def main() -> None:
    members = inspect.getmembers(EnvfarmEnvironment, predicate=inspect.isfunction)
    tools = [name for name, _ in members if name not in ("reset", "get_reward")]
    tools = [name for name in tools if not name.startswith("_")]
    schemas = {name: get_json_schema(getattr(EnvfarmEnvironment, name)) for name in tools}
    names = {name for name, _ in members}
    report = {"trl": trl.__version__, "has_reset": "reset" in names,
              "has_get_reward": "get_reward" in names, "schemas": schemas}  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
