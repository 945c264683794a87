"""The REST API for trainers (FastAPI): a thin shell over the controller."""

from envfarm.api.app import create_app

__all__ = ["create_app"]
