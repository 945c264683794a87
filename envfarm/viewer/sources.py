"""Where runs come from: run directories on disk (``envfarm view``), or the jobs of a server
(``/ui`` of ``envfarm serve``), behind one small interface the pages read.

A server's jobs are read through the same calls the REST API makes (``jobs``, ``job`` and
``groups`` of its ``JobService``, declared here as ``JobReader`` so the viewer imports nothing
above it). Groups are read once, in cursor order, and only their entries are kept; a page that
shows a whole trajectory reads its group again by cursor. Nothing is ever acknowledged.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from envfarm.errors import EnvfarmError
from envfarm.models.jobs import GroupMeta, JobView, RawGroupPage
from envfarm.viewer.entries import Entry, entry_of_line
from envfarm.viewer.index import FileIndex, trajectories_file

GROUP_PAGE = 200
READER = "envfarm-viewer"


class UnknownRun(EnvfarmError):
    """No run or job by that name."""


@dataclass
class RunStatus:
    status: str
    episodes_expected: int | None
    rate: float | None
    """Episodes per second, when it can be told."""
    infra_errors: int
    mean_reward: float | None
    done: int
    detail: str = ""


class Run(Protocol):
    key: str
    name: str
    entries: list[Entry]
    groups: dict[str, GroupMeta]

    @property
    def notes(self) -> list[str]:
        """What was skipped while reading the run, and why."""

    async def refresh(self) -> None: ...

    async def load(self, entry: Entry) -> dict[str, Any]: ...

    def status(self) -> RunStatus: ...

    def artifacts_root(self) -> Path | None: ...


class Catalog(Protocol):
    async def runs(self) -> list[Run]: ...

    async def run(self, key: str) -> Run: ...


class DirRun:
    """One output directory of ``envfarm run``."""

    def __init__(self, key: str, path: Path) -> None:
        self.key = key
        self.path = path
        self.name = path.resolve().name
        self.index = FileIndex(trajectories_file(path))
        self.entries: list[Entry] = []
        self.groups: dict[str, GroupMeta] = {}
        self._summary: dict[str, Any] | None = None

    @property
    def notes(self) -> list[str]:
        return [*self.index.notes, *([self.index.torn] if self.index.torn else [])]

    async def refresh(self) -> None:
        self.index.refresh()
        self.entries = self.index.entries
        self._summary = _read_json(self.path / "summary.json")

    async def load(self, entry: Entry) -> dict[str, Any]:
        return self.index.read(entry)

    def status(self) -> RunStatus:
        summary = self._summary
        infra = sum(1 for e in self.entries if not e.valid and e.infrastructure)
        values = [e.value for e in self.entries if e.valid and e.value is not None]
        mean = sum(values) / len(values) if values else None
        if summary is None:
            return RunStatus(
                "running", None, self._rate(), infra, mean, len(self.entries), "no summary.json yet"
            )
        duration = summary.get("duration_s")
        episodes = summary.get("episodes")
        rate = None
        if isinstance(duration, int | float) and duration > 0 and isinstance(episodes, int):
            rate = episodes / duration
        code = summary.get("exit_code")
        status = "completed" if code == 0 else f"finished (exit {code})"
        expected = episodes if isinstance(episodes, int) else None
        return RunStatus(status, expected, rate, infra, mean, len(self.entries))

    def artifacts_root(self) -> Path | None:
        return self.path

    def _rate(self) -> float | None:
        try:
            elapsed = self.index.path.stat().st_mtime - self.path.stat().st_ctime
        except OSError:
            return None
        return len(self.entries) / elapsed if elapsed > 1 and self.entries else None


class DirCatalog:
    def __init__(self, paths: list[Path]) -> None:
        names: dict[str, int] = {}
        self._runs: dict[str, Run] = {}
        for path in paths:
            base = _slug(path.resolve().name) or "run"
            names[base] = names.get(base, 0) + 1
            key = base if names[base] == 1 else f"{base}-{names[base]}"
            self._runs[key] = DirRun(key, path)

    async def runs(self) -> list[Run]:
        runs = list(self._runs.values())
        for run in runs:
            await run.refresh()
        return runs

    async def run(self, key: str) -> Run:
        run = self._runs.get(key)
        if run is None:
            raise UnknownRun(f"no run {key!r} here")
        await run.refresh()
        return run


class JobReader(Protocol):
    """The read calls of the API's ``JobService`` that the viewer makes."""

    async def job(self, job_id: str) -> JobView: ...

    async def jobs(self) -> list[JobView]: ...

    async def groups(
        self, job_id: str, *, after: int | None, limit: int, wait_s: float, consumer: str = ...
    ) -> RawGroupPage: ...


class JobRun:
    """One job of a server: its completed groups, read in cursor order."""

    def __init__(self, service: JobReader, view: JobView) -> None:
        self.service = service
        self.view = view
        self.key = view.id
        self.name = view.request.get("name") or view.id
        self.entries: list[Entry] = []
        self.skipped: list[str] = []
        self.groups: dict[str, GroupMeta] = {}
        self._cursor = 0
        self._seen_at = time.monotonic()

    async def refresh(self) -> None:
        self.view = await self.service.job(self.key)
        while self._cursor < self.view.last_cursor:
            page = await self.service.groups(
                self.key, after=self._cursor, limit=GROUP_PAGE, wait_s=0, consumer=READER
            )
            if not page.groups:
                break
            for group in page.groups:
                self.groups[group.meta.group_id] = group.meta
                for number, text in enumerate(group.trajectories):
                    try:
                        entry = entry_of_line(text.encode(), group.cursor)
                    except ValueError as exc:
                        self.skipped.append(
                            f"group {group.cursor}, trajectory {number + 1} is skipped: {exc}"
                        )
                        continue
                    self.entries.append(entry)
                self._cursor = group.cursor

    @property
    def notes(self) -> list[str]:
        return self.skipped

    async def load(self, entry: Entry) -> dict[str, Any]:
        cursor: int = entry.locator
        page = await self.service.groups(
            self.key, after=cursor - 1, limit=1, wait_s=0, consumer=READER
        )
        for group in page.groups:
            for text in group.trajectories:
                document: dict[str, Any] = json.loads(text)
                if document.get("trajectory_id") == entry.trajectory_id:
                    return document
        raise UnknownRun(f"trajectory {entry.trajectory_id} is no longer in job {self.key}")

    def status(self) -> RunStatus:
        counts = self.view.counts
        elapsed = (self.view.updated_at - self.view.created_at).total_seconds()
        rate = counts.completed / elapsed if elapsed > 0 and counts.completed else None
        detail = f"{counts.running} running, {counts.queued} queued"
        return RunStatus(
            self.view.status,
            counts.episodes,
            rate,
            counts.infra_errors,
            counts.mean_reward,
            counts.completed,
            detail,
        )

    def artifacts_root(self) -> Path | None:
        return None


class JobCatalog:
    def __init__(self, service: JobReader) -> None:
        self.service = service
        self._runs: dict[str, JobRun] = {}

    async def runs(self) -> list[Run]:
        views = await self.service.jobs()
        runs: list[Run] = []
        for view in views:
            run = self._runs.get(view.id)
            if run is None:
                run = self._runs[view.id] = JobRun(self.service, view)
            run.view = view
            runs.append(run)
        return runs

    async def run(self, key: str) -> Run:
        run = self._runs.get(key)
        if run is None:
            try:
                view = await self.service.job(key)
            except EnvfarmError as exc:
                raise UnknownRun(f"no job {key!r} on this server") from exc
            run = self._runs[key] = JobRun(self.service, view)
        await run.refresh()
        return run


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name).strip("-.")
