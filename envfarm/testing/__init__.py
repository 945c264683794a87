"""Test doubles shipped with envfarm for users' tests as well as ours: scripted and fake-vLLM
policy servers, a scripted rubric judge, a fake sandbox, the helper's channel emulator, and an
in-memory Kubernetes API with a simulated kubelet (``envfarm.testing.k8s``). Production modules
never import this package (an import-linter contract checks it)."""
