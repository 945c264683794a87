"""Offline checks of envfarm's own manifests: a kustomize renderer, the API server's structural
schema rules for CRDs and the Pod Security levels, as far as the unit tests need them. They
check what the repository ships; the real tools (``kubectl kustomize``, the API server's own
admission) check the same on the project's cluster in ``tests/k8s``."""
