"""``envfarm gc``: the engine-side housekeeping command."""

from __future__ import annotations

import click

from envfarm.cli.render import console


@click.command()
@click.option(
    "--keep-gb",
    type=click.FloatRange(min=0),
    default=20.0,
    show_default=True,
    help="Size budget for task images; the oldest unused ones beyond it are removed.",
)
@click.option("--build-cache", is_flag=True, help="Also prune the engine's build cache.")
def gc(keep_gb: float, build_cache: bool) -> None:
    """Remove what envfarm left behind and prune task images beyond a size budget.

    Containers, networks and volumes are removed only when the run that owns them is gone;
    a run in progress is never touched.
    """
    from envfarm.sandbox.docker.gc import GB, collect_garbage

    report = collect_garbage(image_budget_gb=keep_gb, prune_build_cache=build_cache)
    console.print(f"removed {len(report.orphans)} orphaned containers, networks and volumes")
    console.print(
        f"removed {len(report.images)} images ({report.image_bytes_freed / GB:.2f} GB); "
        f"task images kept: {report.task_image_bytes_kept / GB:.2f} GB"
    )
    for name in report.images:
        console.print(f"  {name}", markup=False)
    if report.build_cache_bytes_freed:
        console.print(f"build cache freed: {report.build_cache_bytes_freed / GB:.2f} GB")
