"""What a user can tell the frontends: `FrontendOptions`, one value for every importer.

A leaf module (it imports nothing of pardnn), so the importers and the
registry that calls them (`pardnn.frontends.registry`) both import it and
neither imports the other at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True)
class FrontendOptions:
    """What a user can tell a frontend (the ``pardnn import`` / ``partition`` flags).

    Each frontend reads the fields that concern it and ignores the rest.
    """

    name: str | None = None
    """Graph name to record (default: from the file name)."""
    signature: str | None = None
    """SavedModel signature to import (TensorFlow)."""
    profile_steps: int = 0
    """Run this many profiled steps for op times; 0 = the roofline estimate."""
    batch_size: int | None = None
    """Value for unknown batch dimensions (never silently 1)."""
    dims: Mapping[str, int] = field(default_factory=dict)
    """Values for named dynamic dimensions (ONNX ``--dim name=value``)."""
    device_profile: str = "h100"
    """Roofline device preset for estimated op times (see `pardnn.frontends.roofline`)."""
    keep_unexecuted: bool = False
    """ParDNN DOT: keep ops a training step never runs."""
