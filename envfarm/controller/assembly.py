"""The sandbox backend a process runs on, built in one place from its ``Settings``.

``settings.backend`` is a union with a ``kind`` discriminator: ``docker`` (the local engine, its
base images found as ``Settings.sources`` says) or ``kubernetes`` (pods in a namespace of the
cluster this process runs in, through its service account, else of the kubeconfig's current
context; owned by this process's pod when the downward API names it, pulling envfarm's images
from ``image_registry``). ``envfarm run``, ``check``, ``serve`` and ``worker`` all take their
backend from here; the runtime is not the backend's: each episode's plan carries it.
Each backend's SDK is imported only when it is chosen.
"""

from __future__ import annotations

import os

from envfarm.sandbox.base import SandboxBackend
from envfarm.settings import KubernetesChoice, Settings


def open_backend(settings: Settings) -> SandboxBackend:
    choice = settings.backend
    if isinstance(choice, KubernetesChoice):
        return _kubernetes(settings, choice)
    from envfarm.sandbox.docker.backend import DockerBackend

    return DockerBackend(settings.sources())


def _kubernetes(settings: Settings, choice: KubernetesChoice) -> SandboxBackend:
    from envfarm.k8s.kubeconfig import in_cluster_config, load_kubeconfig
    from envfarm.k8s.rest import RestKubeApi
    from envfarm.sandbox.kubernetes.backend import KubernetesBackend, KubernetesBackendConfig
    from envfarm.sandbox.kubernetes.ownerpod import OwnerPod
    from envfarm.sandbox.kubernetes.podimages import ImageNaming

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    config = in_cluster_config() if in_cluster else load_kubeconfig()
    owner = settings.owner_pod
    backend_config = KubernetesBackendConfig(
        namespace=choice.namespace,
        owner_pod=OwnerPod(**owner.model_dump()) if owner is not None else None,
        images=ImageNaming(registry=settings.image_registry),
    )
    return KubernetesBackend(RestKubeApi(config), backend_config)
