"""envfarm's Kubernetes operator: the EnvPool and RolloutJob reconcilers and the runner that
drives them from watches (``envfarm operator``). The top floor beside ``api``: it reaches the
cluster through ``envfarm.k8s`` and the controller through the REST API (``envfarm.client``)."""
