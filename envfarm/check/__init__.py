"""``envfarm check``: is a task sound? Its lint, its image looked into, its oracle and nop run.

``pipeline.check_tasks`` takes each task its own way through the stages (``stages``): its build,
its oracle and nop episodes (and, with ``--compare-modes``, the oracle in the other verifier
mode), the look inside its image (``oracle_look``, ``leaks``), then its verdict (``verdicts``),
explained where the oracle missed (``explain``). It runs episodes through the controller, as
``envfarm run`` does, and is one of its shells' products, not part of running jobs.
"""
