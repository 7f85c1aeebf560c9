"""Shared fixtures. The real peer data lives outside the repository (../shared/data);
tests that read it skip, saying why, when it is not there. PARDNN_DATA overrides the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# TensorFlow's plain CPU allocator keeps no statistics (tf.config.experimental.get_memory_info('CPU:0') then
# reports nothing, or raises), while the BFC allocator it uses with oneDNN does. Which one a process gets depends
# on the CPU (oneDNN is on by default only on some) unless TF_CPU_ALLOCATOR_USE_BFC asks for BFC; it is read when
# the allocator is first made, so it is set here, before any test runs TensorFlow.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "sample_graphs"


def find_data_dir() -> Path | None:
    candidates = [os.environ.get("PARDNN_DATA"), REPO.parent / "shared" / "data", "/work/shared/data"]
    for c in candidates:
        if c and (Path(c) / "README.md").exists() and (Path(c) / "msr").is_dir():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = find_data_dir()
    if d is None:
        pytest.skip("the peer data (../shared/data) is not present; set PARDNN_DATA to its path")
    return d


@pytest.fixture(scope="session")
def samples() -> list[Path]:
    return sorted(SAMPLES.glob("*.json.gz"))
