"""An in-memory Kubernetes API server with watches, owner cascades and a simulated kubelet, plus
the manifest tooling its tests use (a kustomize renderer, structural-schema and Pod Security
checkers)."""
