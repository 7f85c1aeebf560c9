"""What a user can tell the frontends: `FrontendOptions`, one value for every importer.

A leaf module (it imports nothing of pardnn), so the importers and the
registry that calls them (`pardnn.frontends.registry`) both import it and
neither imports the other at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np


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

    def __post_init__(self) -> None:
        """The checks the command line's flags make (``--batch-size`` and ``--dim`` at least 1, ``--profile`` at
        least 0), for options made in Python: a batch of -1 was otherwise found deep in an import, as "running
        the model to measure it failed: negative dimensions are not allowed", and a batch of 0 imported."""
        def whole(value: object) -> bool:     # as `pardnn.units.is_whole`: numpy's integers too, not a bool
            return isinstance(value, (int, np.integer)) and not isinstance(value, bool)

        if self.batch_size is not None and not (whole(self.batch_size) and self.batch_size >= 1):
            raise ValueError(f"FrontendOptions: batch_size must be a whole number at least 1 or None, "
                             f"got {self.batch_size!r}")
        if not (whole(self.profile_steps) and self.profile_steps >= 0):
            raise ValueError(f"FrontendOptions: profile_steps must be a whole number at least 0, "
                             f"got {self.profile_steps!r}")
        for key, value in dict(self.dims).items():
            if not (whole(value) and value >= 1):
                raise ValueError(f"FrontendOptions: dims[{key!r}] must be a whole number at least 1, got {value!r}")
        # numpy's integers kept as Python's: the batch size is written into placements as JSON
        if self.batch_size is not None:
            object.__setattr__(self, "batch_size", int(self.batch_size))
        object.__setattr__(self, "profile_steps", int(self.profile_steps))
        if any(not isinstance(v, int) for v in dict(self.dims).values()):
            object.__setattr__(self, "dims", {k: int(v) for k, v in dict(self.dims).items()})
