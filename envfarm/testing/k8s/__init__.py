"""An in-memory Kubernetes API server with watches, owner cascades and a simulated kubelet."""
