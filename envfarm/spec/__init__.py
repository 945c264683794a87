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
from envfarm.spec.config_read import parse_task_config
from envfarm.spec.task import Task, content_hash, discover_tasks, load_task

__all__ = [
    "AgentConfig",
    "Author",
    "EnvironmentConfig",
    "HealthcheckConfig",
    "SolutionConfig",
    "Task",
    "TaskConfig",
    "TaskInfo",
    "VerifierConfig",
    "content_hash",
    "discover_tasks",
    "load_task",
    "parse_task_config",
]
