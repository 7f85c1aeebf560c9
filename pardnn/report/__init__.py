"""The HTML report: one self-contained page that shows a placement and why it is what it is.

`render_report(g, cluster, placement, schedule)` returns the page as a
string; `save_report` writes it atomically. The page holds

* a summary table: step time, speedup over one device (or "does not fit one
  device"), per-device compute load and peak memory against capacity, bytes
  moved, transfers, the pipeline's pass timings;
* a Gantt chart of each device's ops and each link's transfers over one step,
  coloured by training phase, with the critical chain marked;
* memory over time per device against its capacity, and the largest tensors
  live at each device's peak;
* the device-by-device communication matrix (bytes and transfer count);
* with a measured run (``pardnn run --json``), predicted against measured
  step time, per device where the run says, and the traced step's timeline
  under the predicted one when the run carries it (TensorFlow runs;
  `pardnn.report.measured_section`).

`render_bench_report(result)` makes the same kind of page from a
``pardnn bench`` result, and `pardnn.report.plan_page` one from a
``pardnn plan`` result (memory per device and speedup against the device
count, and the table). Images are base64 PNGs inside the page; there is no
script and no external URL, so it opens offline. The figures need matplotlib
(the ``bench`` or ``dev`` extra); without it rendering raises
`pardnn.errors.MissingDependencyError` (exit code 6). The numbers come from
`pardnn.report.summary`, which needs nothing beyond numpy.
"""

from __future__ import annotations

from .measured import MeasuredRun, load_measured, measured_from_dict
from .bench_page import render_bench_report
from .render import render_report, save_report
from .summary import Summary, comm_matrix, summarize, top_live

__all__ = ["render_report", "render_bench_report", "save_report", "summarize", "Summary", "comm_matrix", "top_live",
           "MeasuredRun", "load_measured", "measured_from_dict"]
