"""Sandboxes spread over several backends: ``PlacedBackend`` (``backend``) is one backend made of
many, each sandbox placed when it starts by the ``Placer`` (``placer``)."""
