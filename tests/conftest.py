"""Shared fixtures. The real peer data lives outside the repository (../shared/data);
tests that read it skip, saying why, when it is not there. PARDNN_DATA overrides the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
