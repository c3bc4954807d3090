import os
from pathlib import Path

import pyro
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def reference_dir():
    """The paper's reference data: $PIDKL_REFERENCE_DATA or ../shared/data/reference."""
    env = os.environ.get("PIDKL_REFERENCE_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data" / "reference"


@pytest.fixture
def reference():
    root = reference_dir()
    if not root.is_dir():
        pytest.skip(f"reference data not found at {root} (set PIDKL_REFERENCE_DATA)")
    return root


@pytest.fixture(autouse=True)
def _fresh_pyro():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    yield
    pyro.clear_param_store()


torch.set_default_dtype(torch.float64)
