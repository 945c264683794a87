"""Kubernetes without the ``kubernetes`` package: a small async API interface (``api``), a
client over HTTP (``rest``, ``kubeconfig``), watch-fed caches (``informer``) and claims of warm
pods (``pools``). The operator's reconcilers live in ``envfarm.operator``; the in-memory API
server and kubelet for tests in ``envfarm.testing.k8s``."""
