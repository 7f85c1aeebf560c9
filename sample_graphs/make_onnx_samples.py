"""Regenerate the shipped ONNX samples (and, with ``--training``, the onnxruntime-training test artifacts).

Run from the repository root::

    python sample_graphs/make_onnx_samples.py             # sample_graphs/*.onnx (needs the onnx extra)
    python sample_graphs/make_onnx_samples.py --training  # tests/data/onnx/*/training_model.onnx

The architectures are in `pardnn.frontends.onnx.zoo` (real layer structure, random
weights with a fixed seed); the files come out byte for byte the same each
time. ``--training`` needs ``onnxruntime-training`` (1.19.2 is the last
release with wheels for Python 3.11, and it imports ``torch``), which cannot
be installed beside the ``onnxruntime`` the ``onnx`` extra brings: use a
separate virtual environment, e.g. ``python -m venv /tmp/ortt && /tmp/ortt/bin/pip
install onnxruntime-training==1.19.2 onnx torch``, then run this script with
``PYTHONPATH=.`` from it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx

from pardnn.frontends.onnx.zoo import gpt, mlp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

SAMPLES = {
    "onnx_mlp.onnx": lambda: mlp([128, 256, 256, 10], seed=0, name="mlp-128-256-256-10"),
    "onnx_gpt_tiny.onnx": lambda: gpt(vocab=512, d_model=64, heads=4, layers=2, max_len=64, seed=0,
                                      name="gpt-tiny"),
}

TRAINING = {
    # directory under tests/data/onnx: (forward model, parameters that train)
    "mlp_training": lambda: mlp([16, 32, 32, 4], seed=0, batch=8, name="mlp-16-32-32-4"),
    "gpt_training": lambda: gpt(vocab=64, d_model=32, heads=2, layers=2, max_len=32, seed=0, for_training=True,
                                name="gpt-train"),
}


def write_samples() -> None:
    for name, make in SAMPLES.items():
        out = HERE / name
        onnx.save_model(make(), str(out))
        print(f"{out.relative_to(REPO)}: {out.stat().st_size:,} bytes")


def write_training() -> None:
    from onnxruntime.training import artifacts   # onnxruntime-training only

    for name, make in TRAINING.items():
        model = make()
        params = [t.name for t in model.graph.initializer if t.name.endswith((".weight", ".bias"))]
        out = REPO / "tests" / "data" / "onnx" / name
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            artifacts.generate_artifacts(model, requires_grad=params, frozen_params=[],
                                         loss=artifacts.LossType.CrossEntropyLoss,
                                         optimizer=artifacts.OptimType.AdamW, artifact_directory=tmp)
            (out / "training_model.onnx").write_bytes((Path(tmp) / "training_model.onnx").read_bytes())
        print(f"{(out / 'training_model.onnx').relative_to(REPO)}: {len(params)} parameters")


if __name__ == "__main__":
    if "--training" in sys.argv[1:]:
        write_training()
    else:
        write_samples()
