"""``envfarm run --resume OUT``: the run's own options, saved in ``OUT/run.json``.

A run keeps its job in ``OUT/envfarm.db`` (the controller's store) and its command line here,
without API keys, so a resumed run uses the very same tasks, policy and options; keys come
again from ``--api-key`` / ``ENVFARM_API_KEY`` (and the judge's). The settings a flag or the
environment chose (``--offline``, ``--verifier-network``) are saved as they were in effect and
given back to the resumed run as its flags. Finished episodes are not redone: the store knows
them, and episodes that were in flight are retried.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from envfarm.settings import REALISM_CHOICES, VERIFIER_NETWORK_CHOICES, Settings
from envfarm.store.engine import STORE_FILE, default_url
from envfarm.store.store import Store

MANIFEST = "run.json"
SECRETS = ("api_key", "judge_api_key")
KEPT = ("offline", "verifier_network", "sidecar_network", "realism")
"""Flags whose effect is saved as a setting (the environment's value counts too)."""
RESUMING = "envfarm.resuming"


def store_url(out: Path) -> str:
    return default_url(out.resolve())


def save_manifest(out: Path, params: dict[str, Any], settings: Settings) -> None:
    """``params``: the command line's; ``settings``: what it ran with (flags and environment)."""
    saved = {k: v for k, v in params.items() if k not in (*SECRETS, *KEPT, "resume")}
    saved["paths"] = [str(Path(p).resolve()) for p in saved.get("paths", ())]
    saved["out_dir"] = str(out)
    kept = {
        "offline": settings.offline,
        "verifier_network": settings.verifier_network,
        "sidecar_network": settings.sidecar_network,
        "realism": settings.realism,
    }
    manifest = {"params": saved, "settings": kept}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def load_manifest(out: Path, secrets: dict[str, str | None]) -> dict[str, Any]:
    path = out / MANIFEST
    if not path.is_file() or not (out / STORE_FILE).is_file():
        raise click.BadParameter(
            f"{out} is not the output directory of an envfarm run (no {MANIFEST} and {STORE_FILE})",
            param_hint="--resume",
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        params: dict[str, Any] = manifest["params"]
        settings: dict[str, Any] = manifest.get("settings") or {}  # absent before they were kept
        if settings.get("verifier_network") not in (None, *VERIFIER_NETWORK_CHOICES):
            raise ValueError(f"verifier_network {settings['verifier_network']!r}")
        if settings.get("sidecar_network") not in (None, "public", "none"):
            raise ValueError(f"sidecar_network {settings['sidecar_network']!r}")
        if settings.get("realism") not in (None, *REALISM_CHOICES):
            raise ValueError(f"realism {settings['realism']!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise click.BadParameter(f"{path}: unreadable ({exc})", param_hint="--resume") from exc
    params["offline"] = True if settings.get("offline") else None
    params["verifier_network"] = settings.get("verifier_network")
    params["sidecar_network"] = settings.get("sidecar_network")
    params["realism"] = settings.get("realism")
    params["paths"] = tuple(Path(p) for p in params["paths"])
    params["out_dir"] = out
    for name in ("policies",):
        params[name] = tuple(params.get(name, ()))
    click.get_current_context().meta[RESUMING] = True
    return {**params, **secrets, "resume": None}


def resuming() -> bool:
    return bool(click.get_current_context().meta.get(RESUMING))


async def job_to_resume(out: Path) -> tuple[str, int]:
    """The id of the one job in ``out``'s store, and how many of its episodes have ended."""
    store = await Store.open(store_url(out))
    try:
        jobs = await store.jobs()
    finally:
        await store.close()
    if len(jobs) != 1:
        raise click.BadParameter(f"{out}: expected one job in its store, found {len(jobs)}")
    return jobs[0].id, jobs[0].counts.completed
