"""Trainer integrations (docs/trainers.md), in two shapes.

Trainers that take finished trajectories (envfarm runs the agent) get their own record type:
one module per trainer (``trl``, ``verl``, ``skyrl``, ``slime``); each imports without its
trainer but works only with it installed (``pip install 'envfarm[trl]'`` and so on; otherwise
an ``IntegrationError`` says what to install); ``episodes`` (training rows of a trajectory) and
``feed`` (jobs, versions, staleness) are what they share and need no trainer.

Trainers that run the loop drive envfarm's step API: ``trl_environment`` is a TRL
``environment_factory`` class over it (OpenEnv's own client needs nothing from here).

Nothing in envfarm's core imports this package.
"""
