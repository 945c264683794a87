"""Tampering: snapshots of what a verifier trusts, taken before and after the agent
(``snapshot``), compared (``inspection``), the commands the agent ran scanned (``commands``),
and the workdir copied for the diff (``workspace``)."""
