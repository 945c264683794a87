"""Kubernetes without the ``kubernetes`` package: a small async API interface (``api``), an
in-memory implementation with a simulated kubelet (``memory``, ``kubelet``), one over HTTP
(``rest``), and the reconcile logic of envfarm's operator (``envpool``, ``operator``)."""
