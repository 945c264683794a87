"""Task specs: Harbor-format task directories, loaded and validated."""

from envfarm.spec.config import (
    AgentConfig,
    Author,
    EnvironmentConfig,
    HealthcheckConfig,
    SolutionConfig,
    TaskConfig,
    TaskInfo,
    VerifierConfig,
)
from envfarm.spec.task import Task, content_hash, discover_tasks, load_task
from envfarm.spec.task_toml import ParsedConfig, parse_task_config, read_task_config

__all__ = [
    "AgentConfig",
    "Author",
    "EnvironmentConfig",
    "HealthcheckConfig",
    "ParsedConfig",
    "SolutionConfig",
    "Task",
    "TaskConfig",
    "TaskInfo",
    "VerifierConfig",
    "content_hash",
    "discover_tasks",
    "load_task",
    "parse_task_config",
    "read_task_config",
]
