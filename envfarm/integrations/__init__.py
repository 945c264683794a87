"""Adapters for trainers that take finished trajectories: envfarm runs the agent, the trainer
gets its own record type (docs/trainers.md).

One module per trainer (``trl``, ``verl``, ``skyrl``, ``slime``): each imports without its
trainer but works only with it installed (``pip install 'envfarm[trl]'`` and so on; otherwise
an ``IntegrationError`` says what to install); ``episodes`` (training rows of a trajectory) and
``feed`` (jobs, versions, staleness) are what they share and need no trainer. Nothing in
envfarm's core imports this package.
"""
