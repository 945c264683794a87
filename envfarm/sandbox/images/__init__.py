"""Building and resolving images, whatever the engine: the alias table of offline substitutes
(``aliases``), where a base comes from (``sources``), a task's Dockerfile read and rewritten
(``task_image``, ``dockerlines``, ``runmounts``), bases resolved without pulling (``offline``)
and the installed-agent layer (``agent_layer``). The Docker builder is ``sandbox/docker/images/``.
"""
