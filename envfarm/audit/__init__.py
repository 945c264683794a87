"""The tells audit: what a model can see, from inside a task's environment, that a developer's
workstation would not show (``envfarm audit``; docs/audit.md)."""
