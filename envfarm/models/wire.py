"""The base of the trajectory contract's models (``envfarm.models.trajectory``).

An unknown field is refused rather than dropped, so a trajectory written by a newer envfarm is
never read back short of what it said; each field's docstring is its description in the
generated JSON Schema (``envfarm/schemas/trajectory.schema.json``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
