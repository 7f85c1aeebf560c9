"""Regenerate the shipped sample graphs from the real data in ../shared/data.

Run from the repository root: ``python sample_graphs/make_samples.py [DATA_DIR]``.
Each sample is converted by the importer in `pardnn.frontends.peers` and written as
a compressed ``pardnn.graph``; `sample_graphs/README.md` says where each comes
from and which rules the importer applied.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pardnn.frontends import load_input
from pardnn.ir import save_graph

SAMPLES = {
    # output name: (path under the data directory, graph name)
    "pardnn_vgg16.json.gz": ("pardnn_v1/vgg/vgg_dot.dot", "pardnn-vgg16"),
    "msr_bert_l3_training.json.gz": ("msr/throughput-inputs/OperatorGraphs/bert_l-3_training.json",
                                     "msr-bert_l-3_training"),
    "pipedream_resnet50.json.gz": ("pipedream/resnet50/graph.txt", "pipedream-resnet50"),
    "pipedream_gnmt.json.gz": ("pipedream/gnmt/graph.txt", "pipedream-gnmt"),
}


def main(data_dir: str | None = None) -> None:
    here = Path(__file__).resolve().parent
    data = Path(data_dir) if data_dir else here.parent.parent / "shared" / "data"
    if not data.is_dir():
        raise SystemExit(f"no data directory at {data}; pass its path as the first argument")
    for out, (rel, name) in SAMPLES.items():
        g = load_input(data / rel)
        g = g.with_costs(name=name)
        save_graph(g, here / out)
        print(f"{out}: {g.num_nodes} nodes, {g.num_edges} edges from {rel}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
