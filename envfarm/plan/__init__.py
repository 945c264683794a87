"""One plan per episode: what its sandbox is, how its agent runs, how its verifier runs.

``planner.plan_episode`` is the one place where a task's own needs, a job's settings and the
server's (or the command line's) defaults meet; ``models`` holds what it decides, as frozen
values. Backends get the plan's ``SandboxSpec`` and grading its ``VerifierPlan``: neither reads
a task, and neither decides a network or a runtime.
"""
