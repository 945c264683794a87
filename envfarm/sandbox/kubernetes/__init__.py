"""The Kubernetes sandbox backend: environments as pods, services as sidecar containers."""
