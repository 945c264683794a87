"""The Docker engine's image builder: task images and their bases (``task_images``), envfarm's
recipe images (``recipes``, ``rootfs``), a build through the SDK (``build``, ``buildlog``),
pulls (``pull``), what images inherit from the host (``hostconfig``, ``aptconfig``), the
images of a compose environment (``environment_images``) and agent layers (``agent_layer``).
"""
