"""The capture endpoint: the model server an installed agent talks to (docs/agents.md)."""
