"""confkit: layered configuration for small services (defaults < file < environment)."""

from confkit.loader import load_config

__all__ = ["load_config"]
