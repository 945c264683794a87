"""envfarm's tasks as a TRL ``environment_factory``: the trainer samples, envfarm runs the tools.

TRL's ``GRPOTrainer(environment_factory=...)`` makes one instance per rollout (pooled, reset
between rollouts), offers its public methods to the model as tools, calls ``reset(**row)`` with
the dataset row before generating (a returned string is appended to the prompt), and scores the
rollout with ``get_reward()``. Here each instance is one connection to an ``envfarm serve``'s
step API (``/v1/openenv``, the OpenEnv wire; ``api/openenv.py``): ``reset`` opens a session on
the row's ``task`` and returns its instruction, the tools are envfarm's own (``bash``,
``read_file``, ``write_file``, ``edit_file``, ``submit``) run in the task's sandbox with the
built-in loop's limits, and ``get_reward`` submits if the model did not and returns the reward
graded in the clean room, exactly as ``envfarm run`` grades. An invalid reward (the environment
failed) is ``None``, which TRL turns into NaN and leaves out, never 0. The trajectory, with its
tamper flags, is in the server's store like any episode's.

Only the standard library and ``websockets`` (an envfarm dependency) are needed; TRL is not
imported here.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from websockets.sync.client import ClientConnection, connect

from envfarm.errors import EnvfarmError

DEFAULT_TIMEOUT_S = 900.0
"""How long one message may take: a reset builds and starts the environment, a submit grades.
A reset refused because every slot of the server is taken is retried for as long."""
CAPACITY_RETRY_S = 1.0


class StepApiError(EnvfarmError):
    """The step API answered with an error; ``code`` is OpenEnv's error code."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code


class EnvfarmEnvironment:
    """One rollout's environment (TRL ``environment_factory``). Each dataset row needs a ``task``
    column (a task of the server's ``--tasks``), and may have a ``seed``::

        from functools import partial
        factory = partial(EnvfarmEnvironment, "http://127.0.0.1:8000", token="...")
        trainer = GRPOTrainer(model=..., train_dataset=rows, environment_factory=factory)
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        base = (url or os.environ.get("ENVFARM_URL") or "http://127.0.0.1:8000").rstrip("/")
        token = token if token is not None else os.environ.get("ENVFARM_TOKEN")
        secret = f"/{token}" if token else ""
        self._url = base.replace("http", "ws", 1) + f"/v1/openenv{secret}/ws"
        self._timeout_s = timeout_s
        self._ws: ClientConnection | None = None
        self._stack = contextlib.ExitStack()
        self.observation: dict[str, Any] = {}
        self.reward: float | None = None
        self.done = False

    def reset(self, task: str | None = None, seed: int | None = None, **_: Any) -> str:
        """Start a new episode of ``task`` (a new session; an unfinished one is abandoned)."""
        self.reward, self.done = None, False
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                answer = self._send("reset", {"task": task, "seed": seed})
                break
            except StepApiError as exc:  # more rollouts at once than the server's slots
                if exc.code != "CAPACITY_REACHED" or time.monotonic() > deadline:
                    raise
                time.sleep(CAPACITY_RETRY_S)
        self.observation = answer["observation"]
        return str(self.observation["instruction"])

    def bash(self, command: str) -> str:
        """Run a bash command in the environment and return its output and exit code.

        Args:
            command: The command to run.
        """
        return self._tool("bash", {"command": command})

    def read_file(self, path: str) -> str:
        """Return the content of a text file.

        Args:
            path: The file's path (relative to the working directory, or absolute).
        """
        return self._tool("read_file", {"path": path})

    def write_file(self, path: str, content: str) -> str:
        """Create or overwrite a file with the given content.

        Args:
            path: The file's path (relative to the working directory, or absolute).
            content: The file's new content.
        """
        return self._tool("write_file", {"path": path, "content": content})

    def edit_file(self, path: str, old: str, new: str) -> str:
        """Replace the single occurrence of `old` in a file with `new`.

        Args:
            path: The file's path (relative to the working directory, or absolute).
            old: The text to replace; it must occur exactly once.
            new: The replacement text.
        """
        return self._tool("edit_file", {"path": path, "old": old, "new": new})

    def submit(self) -> str:
        """Finish the task. Call this once your work is complete; nothing runs after it."""
        return self._tool("submit", {})

    def get_reward(self) -> float | None:
        """The episode's graded reward (submitting first if the model did not); None when the
        reward is invalid (the environment failed), which TRL leaves out of the batch."""
        if not self.done:
            self._tool("submit", {})
        return self.reward

    def __enter__(self) -> EnvfarmEnvironment:
        return self

    def __exit__(self, *_: object) -> None:
        self._close()

    def _close(self) -> None:
        """Close the connection (an unfinished episode is abandoned, recorded ungraded). Not a
        public method: TRL would offer it to the model as a tool."""
        if self._ws is not None:
            try:
                self._ws.send(json.dumps({"type": "close"}))
            finally:
                self._ws = None
                self._stack.close()

    def _tool(self, name: str, arguments: dict[str, Any]) -> str:
        if self.done:
            return "Error: the episode has ended; nothing runs after `submit`."
        answer = self._send("step", {"tool": name, "arguments": arguments})
        observation: dict[str, Any] = answer["observation"]
        if answer["done"]:
            self.done = True
            self.reward = answer["reward"] if observation.get("reward_valid") else None
        return str(observation.get("output") or observation.get("error") or "")

    def _send(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        if self._ws is None:
            self._ws = self._stack.enter_context(connect(self._url, open_timeout=60, max_size=None))
        self._ws.send(json.dumps({"type": kind, "data": data}))
        message = json.loads(self._ws.recv(timeout=self._timeout_s))
        if message.get("type") == "error":
            error = message.get("data", {})
            raise StepApiError(f"{kind}: {error.get('message')}", str(error.get("code")))
        answer: dict[str, Any] = message["data"]
        return answer

    def __del__(self) -> None:
        self._stack.close()
