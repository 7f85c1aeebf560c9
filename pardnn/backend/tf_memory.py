"""TensorFlow's own allocator peaks over a step (needs TensorFlow).

``tf.config.experimental.get_memory_info(device)`` gives an allocator's
``current`` and ``peak`` bytes, and ``reset_memory_stats(device)`` sets its
peak to what is allocated now. GPUs always use TensorFlow's BFC allocator,
which keeps these statistics. On the CPU it depends: with oneDNN on (the
default on many, not all, x86 CPUs) the CPU allocator is a BFC allocator;
with oneDNN off it is a plain allocator that keeps none, and TensorFlow then
raises or reports zeros. ``TF_CPU_ALLOCATOR_USE_BFC=true`` asks for the BFC
allocator on every CPU; TensorFlow reads it when the CPU allocator is first
made, so `pardnn.frontends.tensorflow._tf` sets it (unless the user did)
before TensorFlow is imported. A process that ran TensorFlow before that
keeps its allocator, and `PeakMeter` then reports no peaks rather than
wrong ones.

What is measured (`PeakMeter`): ``current`` of each allocator before the
session is made (what the process already held: other models, eager
tensors), then, after warm-up steps, the peak over the timed steps. The
step's peak is that peak less the bytes held before: the step's variables,
optimizer slots, fed inputs and every intermediate, which is what the
machine model's peak counts (docs/machine-model.md, "Measured peaks").

Logical CPU devices share the host's one CPU allocator, so on them there is
one figure for all devices (`allocator_names`); each GPU has its own. A
cluster's allocators live in its servers' processes and are not measured
here.
"""

from __future__ import annotations

from typing import Mapping, Sequence

STATS_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def allocator_names(devices: Sequence[str], mode: str) -> tuple[str, ...]:
    """The allocators (``CPU:0``, ``GPU:i``) that hold the step's tensors when it runs on ``devices`` locally.

    ``mode`` is the run's (``cpu``: logical CPU devices, one shared allocator; ``gpu``: one per GPU, host ops on
    the host CPU's; ``cluster``: none here).

    >>> allocator_names(["/device:CPU:0", "/device:CPU:1"], "cpu")
    ('CPU:0',)
    >>> allocator_names(["/device:GPU:1", "/device:GPU:0"], "gpu")
    ('GPU:0', 'GPU:1')
    """
    if mode == "cpu":
        return ("CPU:0",)
    if mode == "gpu":
        from .tf_devices import parse_device
        return tuple(sorted({f"GPU:{parse_device(d).index or 0}" for d in devices}))
    return ()


class PeakMeter:
    """Peaks of TensorFlow allocators over some steps, less what each held when the meter was made.

    Make it before the session (``base``), call `reset` after the warm-up steps and `read` after the measured
    ones. Where an allocator keeps no statistics, `read` gives None and `reason` says why.
    """

    def __init__(self, names: Sequence[str]):
        from ..frontends.tensorflow._tf import tf
        self._tf = tf
        self.names = tuple(names)
        self.reason = ""
        self.base: dict[str, int] = {}
        for n in self.names:
            info = self._info(n)
            if info is None:
                break
            self.base[n] = int(info["current"])

    def _info(self, name: str) -> Mapping[str, int] | None:
        try:
            info = self._tf.config.experimental.get_memory_info(name)
        except (ValueError, RuntimeError) as exc:
            self.reason = (f"{name}: TensorFlow's allocator keeps no statistics in this process "
                           f"({str(exc).splitlines()[0]}; set {STATS_ENV}=true before TensorFlow starts)")
            return None
        return info

    @property
    def available(self) -> bool:
        return bool(self.names) and len(self.base) == len(self.names)

    def reset(self) -> None:
        if not self.available:
            return
        for n in self.names:
            try:
                self._tf.config.experimental.reset_memory_stats(n)
            except (ValueError, RuntimeError) as exc:
                self.reason = f"{n}: cannot reset TensorFlow's allocator statistics ({str(exc).splitlines()[0]})"
                self.base.clear()
                return

    def read(self) -> dict[str, int] | None:
        """Each allocator's peak since `reset`, less its bytes before the session; None when not measured."""
        if not self.available:
            return None
        out, peaks = {}, {}
        for n in self.names:
            info = self._info(n)
            if info is None:
                return None
            peaks[n] = int(info["peak"])
            out[n] = max(0, peaks[n] - self.base[n])
        if not any(peaks.values()):     # a step allocates somewhere: allocators that count nothing
            self.reason = (f"{', '.join(self.names)}: TensorFlow's allocator keeps no statistics in this process "
                           f"(set {STATS_ENV}=true before TensorFlow starts)")
            return None
        return out                      # an idle allocator (a GPU with nothing placed on it) is a real 0
