"""Adapters for trainers that take finished trajectories: envfarm runs the agent, the trainer
gets its own record type (docs/trainers.md).

One module per trainer (``trl``, ``verl``, ``skyrl``, ``slime``), each imported only by whoever
uses it, since each needs its trainer installed (``pip install 'envfarm[trl]'`` and so on);
``episodes`` (training rows of a trajectory) and ``feed`` (jobs, versions, staleness) are what
they share and need no trainer. Nothing in envfarm's core imports this package.
"""
