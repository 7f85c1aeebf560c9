"""Check that the held-out set is the one frozen in SHA256SUMS (exit 1 on any difference).

Run from the repository root::

    python benchmarks/heldout/check_frozen.py [--skip-synthetic]                  # set v1 (benchmarks/heldout/)
    python benchmarks/heldout/check_frozen.py --set heldout2 [--skip-synthetic]   # set v2 (benchmarks/heldout2/)

Each ``graphs/*.json.gz`` line is the SHA-256 of the committed file; each
``synthetic:<name>`` line is the SHA-256 of the JSON that `pardnn.ir.save_graph`
writes for the generated graph (`frontends.synthetic_wide`), regenerated here.
A set ``NAME`` is the folder ``benchmarks/NAME/``; its ``make_NAME.py`` says
where its files are and how its synthetic graphs are generated.
A change to the generator, to `save_graph`'s output or to a committed file
shows up as a mismatch: the held-out set is then no longer the frozen one.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from make_heldout import SUMS, sha256_file, synthetic_sha256  # noqa: E402,F401

SETS = ("heldout", "heldout2", "heldout3")     # benchmarks/<set>/, built by its make_<set>.py


def load_set(name: str = "heldout"):
    """The build module of held-out set ``name``: its HERE, SUMS, sha256_file and synthetic_sha256."""
    if name not in SETS:
        raise SystemExit(f"unknown held-out set {name!r} (one of {', '.join(SETS)})")
    sys.path.insert(0, str(HERE.parent / name))
    return importlib.import_module(f"make_{name}")


def read_sums(path: Path = SUMS) -> list[tuple[str, str]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            digest, label = line.split(None, 1)
            out.append((digest, label.strip()))
    return out


def actual_sha256(label: str, heldout=None) -> str | None:
    """The SHA-256 of one SHA256SUMS line's graph now, in set ``heldout`` (a `load_set` module; v1 by default)."""
    heldout = heldout or load_set()
    if label.startswith("synthetic:"):
        n = int(label.split("-")[-1].rstrip("k")) * 1000
        return heldout.synthetic_sha256(n)
    p = heldout.HERE / label
    return heldout.sha256_file(p) if p.exists() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-synthetic", action="store_true", help="check only the committed files (fast)")
    ap.add_argument("--set", default="heldout", choices=SETS, help="which held-out set (default: v1, heldout)")
    args = ap.parse_args(argv)
    heldout = load_set(args.set)
    bad = 0
    for digest, label in read_sums(heldout.SUMS):
        if args.skip_synthetic and label.startswith("synthetic:"):
            print(f"skip     {label}")
            continue
        got = actual_sha256(label, heldout)
        status = "ok" if got == digest else ("MISSING" if got is None else "CHANGED")
        bad += status != "ok"
        print(f"{status:<8} {label}" + ("" if status == "ok" else f"  (frozen {digest[:12]}, now {str(got)[:12]})"),
              flush=True)
    which = "held-out set" + ("" if args.set == "heldout" else f" {args.set}")
    print(f"{which}: " + ("FROZEN SET INTACT" if not bad else f"{bad} DIFFERENCE(S) from SHA256SUMS"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
