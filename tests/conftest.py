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
# one torch thread per test process: faster than two on this project's 2-core machines (36 s
# against 79 s wall on test_conditioned, test_systems and test_statespace's fast tests), and
# `.ci/run` runs the slow tests in two processes (pytest-xdist), which two threads each
# would oversubscribe
THREADS = os.environ.get("PIDKL_TEST_THREADS", "1")
torch.set_num_threads(int(THREADS))
# ... and in what the tests start (the doc blocks, the notebooks' kernels, the CLI)
os.environ.setdefault("OMP_NUM_THREADS", THREADS)
os.environ.setdefault("MKL_NUM_THREADS", THREADS)
