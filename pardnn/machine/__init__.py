"""The machine model (SPEC §1): everything pardnn knows about how a placed step runs.

* `kernel`: the compiled event loop (`run_kernel` is the only way to call it);
* `schedule`: `simulate` and the `Schedule` it returns, with every query the
  passes, baselines and report ask (input arrivals, transfer rows, memory
  items alive at an instant, the critical chain, rule violations);
* `costs`: placement-independent estimates on the average device (`CostModel`);
* `evaluator`: a counting wrapper for passes that score many assignments.

Nothing outside this package reads the kernel's arrays or rebuilds a
schedule query.
"""

from .costs import CostModel, average_time_us, device_order
from .evaluator import Evaluator
from .kernel import run_kernel
from .schedule import (DEVICE, EDGE, OUTPUT, RECEIVED, TEMP, Chain, MemoryItems, Schedule, Transfers, Violation,
                       describe_item, rule_violations, simulate, single_device_peak)

__all__ = ["DEVICE", "EDGE", "OUTPUT", "RECEIVED", "TEMP", "Chain", "CostModel", "Evaluator", "MemoryItems",
           "Schedule", "Transfers", "Violation", "average_time_us", "describe_item", "device_order", "rule_violations",
           "run_kernel", "simulate", "single_device_peak"]
