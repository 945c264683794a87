"""The clean room: the agent's changes to the workdir read and judged (``carry``, ``scope``),
carried into a fresh container (``receive``) or kept in place, the agent's container swept or
restarted (``inplace``); the second snapshot's workspace derived from the capture
(``derived``)."""
