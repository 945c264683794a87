"""Image recipes shipped with envfarm (package data, read through importlib.resources)."""
