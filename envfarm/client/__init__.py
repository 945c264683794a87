"""The async Python client for envfarm's REST API, and exporters for offline training.

It depends only on the wire models (``envfarm.models``) and the error tree, so a trainer can use
it without the controller's dependencies being exercised.
"""

from envfarm.client.client import EnvfarmClient, request_body
from envfarm.client.errors import ApiConnectionError, ApiError

__all__ = ["ApiConnectionError", "ApiError", "EnvfarmClient", "request_body"]
