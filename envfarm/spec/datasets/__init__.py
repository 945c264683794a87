"""SWE-bench-style datasets (JSON, JSONL, Parquet) read as ordinary task directories."""

from envfarm.spec.datasets.source import dataset_tasks, is_dataset_path

__all__ = ["dataset_tasks", "is_dataset_path"]
