"""Make ONNX models from PyTorch modules: the PyTorch test fixtures, and ResNet18's training artifacts.

This is the recipe of docs/pytorch.md, run. It needs torch and
onnxruntime-training (never pardnn's extras; see docs/pytorch.md for the
versions that work), in an environment of its own::

    python -m venv /tmp/venv-torch
    /tmp/venv-torch/bin/pip install torch==2.13.0 torchvision==0.28.0 onnx onnxruntime-training==1.19.2
    /tmp/venv-torch/bin/python sample_graphs/make_pytorch_samples.py                 # the fixtures
    /tmp/venv-torch/bin/python sample_graphs/make_pytorch_samples.py --resnet18 DIR  # ResNet18 artifacts in DIR

The fixtures, from `TinyCNN` (conv, batch norm, ReLU, max pool, conv, batch
norm, ReLU, global average pool, linear; 3x16x16 images, 10 classes):

* ``tests/data/onnx/cnn_training/``: onnxruntime-training's artifacts
  (CrossEntropy loss, AdamW): ``training_model.onnx``, ``eval_model.onnx``,
  ``optimizer_model.onnx`` and ``checkpoint``; the training graph has
  onnxruntime's gradient ops (``ConvGrad``, ``MaxPoolGrad``,
  ``BatchNormInternal``, ``BatchNormalizationGrad``, ``ReluGrad``,
  ``SoftmaxCrossEntropyLossGrad``, ...). Beside them, ``real_shapes.json``:
  the type and shape of every node output in one onnxruntime-training run at
  batch 4, which the tests hold pardnn's inferred shapes to;
* ``tests/data/onnx/cnn_inference.onnx``: the same module in eval mode through
  ``torch.onnx.export``.

The weights come from ``torch.manual_seed(0)``; the batch dimension is dynamic
(``batch``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import onnx
import torch
from torch import nn

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "onnx"
OPSET = 17


class TinyCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def export(module: nn.Module, example: torch.Tensor, path: Path, *, training: bool) -> None:
    """``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``), a dynamic batch, opset 17.

    For training, the module is exported in training mode without constant
    folding, so batch norm keeps its training form and every parameter stays
    an initializer that ``generate_artifacts`` can make trainable.
    """
    module.train(training)
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(module, (example,), str(path), input_names=["input"], output_names=["output"],
                      dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, opset_version=OPSET,
                      training=mode, do_constant_folding=not training, export_params=True, dynamo=False)


def training_artifacts(module: nn.Module, example: torch.Tensor, out: Path) -> list[str]:
    """onnxruntime-training's artifacts for ``module`` in ``out`` (CrossEntropy, AdamW); returns the parameters."""
    from onnxruntime.training import artifacts   # onnxruntime-training only

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "forward.onnx"
        export(module, example, f, training=True)
        model = onnx.load(str(f))
    params = [name for name, p in module.named_parameters() if p.requires_grad]
    artifacts.generate_artifacts(model, requires_grad=params, frozen_params=[],
                                 loss=artifacts.LossType.CrossEntropyLoss, optimizer=artifacts.OptimType.AdamW,
                                 artifact_directory=str(out))
    return params


def real_shapes(path: Path, batch: int) -> dict[str, list]:
    """``{value: [elem_type, shape]}`` of every node output of the model at ``path``, from one onnxruntime run.

    Run with onnxruntime-training's kernels on example inputs (``batch`` for
    every dynamic dimension): the sizes pardnn infers are tested against these.
    """
    import numpy as np
    import onnxruntime as ort
    from onnx import helper

    model = onnx.load(str(path))
    names = [o for n in model.graph.node for o in n.output if o]
    have = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names if o not in have)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else batch for d in i.shape]
        feeds[i.name] = (rng.standard_normal(shape).astype(np.float32) if i.type == "tensor(float)"
                         else np.zeros(shape, {"tensor(int64)": np.int64, "tensor(bool)": bool}[i.type]))
    values = sess.run(names, feeds)
    return {n: [helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), list(np.asarray(v).shape)]
            for n, v in zip(names, values)}


def write_fixtures() -> None:
    torch.manual_seed(0)
    module = TinyCNN()
    example = torch.randn(4, 3, 16, 16)
    out = DATA / "cnn_training"
    shutil.rmtree(out, ignore_errors=True)
    params = training_artifacts(module, example, out)
    shapes = real_shapes(out / "training_model.onnx", batch=4)
    (out / "real_shapes.json").write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                                              for k, v in sorted(shapes.items())) + "\n}\n")
    print(f"{out.relative_to(REPO)}: {len(params)} parameters, "
          + ", ".join(f"{p.name} {p.stat().st_size:,} B" for p in sorted(out.iterdir())))
    f = DATA / "cnn_inference.onnx"
    export(module, example, f, training=False)
    print(f"{f.relative_to(REPO)}: {f.stat().st_size:,} B")


def write_resnet18(out: Path) -> None:
    from torchvision.models import resnet18

    torch.manual_seed(0)
    params = training_artifacts(resnet18(num_classes=1000), torch.randn(2, 3, 224, 224), out)
    print(f"{out}: ResNet18, {len(params)} parameters")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--resnet18", metavar="DIR", type=Path, help="write ResNet18's training artifacts to DIR "
                    "instead of the fixtures")
    args = ap.parse_args()
    if args.resnet18:
        write_resnet18(args.resnet18)
    else:
        write_fixtures()
