"""Build held-out set v3 of issue 14: new graphs, frozen before the eleventh round of partitioner work.

Run from the repository root::

    python benchmarks/heldout3/make_heldout3.py --keras          # Keras applications, Transformer, LSTM (tf extra)
    /tmp/hub/bin/python benchmarks/heldout3/make_heldout3.py --hub   # keras-hub backbones (their own venv)
    python benchmarks/heldout3/make_heldout3.py --freeze         # write SHA256SUMS (files + generated synthetics)
    python benchmarks/heldout3/make_heldout3.py --stats          # the README's table

Sets v1 and v2 have been looked at while tuning (their per-case numbers were
read to decide the eleventh round's changes), so v3 holds models that appear
in neither, nor in the tuning suite. Real models are built and imported as
v1's and v2's (`make_heldout.build_real`: random weights, seed 0, forward +
gradients + Adam through `frontends.tensorflow.import_keras`, profiled for 3
steps with one TensorFlow thread each way), the keras-hub backbones with the
tuning suite's builders (`make_tuning._hub_encoder` / `_hub_decoder`).

The synthetic graphs are `frontends.synthetic_wide.wide_training_graph` with
a seed neither v1 (0) nor v2 (1) used (2), at sizes neither used; like theirs
they are generated, not stored, and frozen by the SHA-256 of the uncompressed
JSON `pardnn.ir.save_graph` writes for them.

No tuning decision may look at these graphs (benchmarks/heldout3/README.md).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path


HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GRAPHS_DIR = HERE / "graphs"
SUMS = HERE / "SHA256SUMS"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "heldout"))
sys.path.insert(0, str(ROOT / "benchmarks" / "heldout2"))
sys.path.insert(0, str(ROOT / "benchmarks" / "tuning"))

import make_heldout as v1  # noqa: E402  (the builders and the import, shared with sets v1 and v2)
import make_heldout2 as v2  # noqa: E402
import make_tuning as tuning  # noqa: E402  (the keras-hub builders)

from make_heldout import PROFILE_STEPS, sha256_file  # noqa: E402,F401  (check_frozen and run_heldout use them)

ORIGIN = "benchmarks/heldout3/make_heldout3.py"
TAG = "issue 14, held-out set v3"


# None of these is in held-out set v1 (ResNet50, DenseNet121, MobileNetV2, EfficientNetB0, GPT-2, BERT,
# Transformers of 6/24/96 layers), v2 (InceptionV3, Xception, ResNet101V2, DenseNet169, MobileNetV3Small,
# EfficientNetV2B0, ConvNeXtTiny, NASNetMobile, a 48-layer Transformer, a GRU) or the tuning suite
# (MobileNet, MobileNetV3Large, EfficientNetB1, ResNet152, InceptionResNetV2, a 12-layer Transformer, RoBERTa,
# DistilBERT, OPT, ELECTRA, LSTMs of 2 layers; the samples' VGG-16). Its LSTM is the tuning suite's builder
# with this set's own sizes.
KERAS = {
    "keras-resnet50v2": v1._app("ResNet50V2"),
    "keras-densenet201": v1._app("DenseNet201"),
    "keras-efficientnetb3": v1._app("EfficientNetB3"),
    "keras-efficientnetv2b2": v1._app("EfficientNetV2B2"),
    "keras-vgg19": v1._app("VGG19"),
    "keras-transformer-32l": v1._transformer(32, d_model=128, heads=4, ff=512, seq=96, batch=2),
    "keras-lstm-3l": tuning._recurrent(3, units=192, seq=48, batch=4, kernel=5),
}

HUB = {
    "hub-llama": tuning._hub_decoder("LlamaBackbone", layers=8, vocab=32000, num_query_heads=8,
                                     num_key_value_heads=4, hidden_dim=512, intermediate_dim=1408),
    "hub-debertav3": tuning._hub_encoder("DebertaV3Backbone", layers=6, vocab=32000, num_heads=12, hidden_dim=384,
                                         intermediate_dim=1536, max_sequence_length=512),
}

SYNTHETIC_SIZES = (30_000, 150_000)
SYNTHETIC_SEED = 2


# v2's generators with this set's seed
synthetic_name = functools.partial(v2.synthetic_name, seed=SYNTHETIC_SEED)
synthetic_graph = functools.partial(v2.synthetic_graph, seed=SYNTHETIC_SEED)
synthetic_from_label = functools.partial(v2.synthetic_from_label, seed=SYNTHETIC_SEED)
synthetic_sha256 = functools.partial(v2.synthetic_sha256, seed=SYNTHETIC_SEED)


def expected_entries() -> list[tuple[str, str]]:
    """(kind, label) of every graph of set v3, in SHA256SUMS order."""
    return ([("file", f"graphs/{name}.json.gz") for name in {**KERAS, **HUB}]
            + [("synthetic", f"synthetic:{synthetic_name(n)}") for n in SYNTHETIC_SIZES])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keras", action="store_true", help="build the Keras models (tf extra)")
    ap.add_argument("--hub", action="store_true", help="build the keras-hub backbones (needs keras-hub)")
    ap.add_argument("--only", help="build only graphs whose name contains this")
    ap.add_argument("--steps", type=int, default=PROFILE_STEPS, help=f"profiled steps (default {PROFILE_STEPS})")
    ap.add_argument("--freeze", action="store_true", help="write SHA256SUMS for the built files and synthetics")
    ap.add_argument("--stats", action="store_true", help="print a Markdown table of the graphs")
    args = ap.parse_args(argv)
    GRAPHS_DIR.mkdir(exist_ok=True)
    todo = {**(KERAS if args.keras else {}), **(HUB if args.hub else {})}
    for name, builder in todo.items():
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        v1.build_real(name, builder, args.steps, graphs_dir=GRAPHS_DIR, origin=ORIGIN, heldout=TAG)
        print(f"{name}: built in {time.perf_counter() - t0:.0f} s (model, import and profile)", flush=True)
    # v2's table and freezing code, run over this module's graphs
    this = sys.modules[__name__]
    if args.stats:
        v2.print_stats(this)
    if args.freeze:
        lines = [f"{h}  {label}" for h, label in v2.current_sums(skip_missing=True, heldout=this)]
        SUMS.write_text("".join(line + "\n" for line in lines))
        print(f"{SUMS}: {len(lines)} entries")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    main()
