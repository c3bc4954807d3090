"""The motion-capture loader (CMU subject 35): the paper's split, the early-frames split,
refusals; the real file when ../shared/data/mocap (or PIDKL_MOCAP) has it, a small file of
the same layout otherwise."""

import numpy as np
import pytest
from scipy.io import savemat

from pyro_pidkl import datasets
from pyro_pidkl.datasets import find_mocap, mocap


@pytest.fixture
def mocap_file():
    try:
        return find_mocap()
    except FileNotFoundError:
        pytest.skip("cmu35WalkJog.mat not found (../shared/data/mocap or PIDKL_MOCAP)")


@pytest.fixture
def small_file(tmp_path):
    """Three trials of 10, 12 and 8 frames, 62 channels, column 59 constant."""
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(30, 62))
    Y[:, 59] = 7.125
    lbls = np.zeros((30, 3))
    lbls[:10, 0], lbls[10:22, 1], lbls[22:, 2] = 1, 1, 1
    path = tmp_path / "cmu35WalkJog.mat"
    savemat(path, {"Y": Y, "lbls": lbls})
    return path, Y


def test_the_papers_task(mocap_file):
    d = mocap(seed=0, path=mocap_file)
    assert d.input_names == ("t",) and d.X_train.shape == (500, 1) and d.X_test.shape == (2000, 1)
    assert not set(d.X_train[:, 0]) & set(d.X_test[:, 0])        # disjoint frames
    Y, _ = datasets.load_mocap(mocap_file)
    np.testing.assert_array_equal(d.y_train, Y[d.X_train[:, 0].astype(int), 60])
    assert abs(Y[:, 60].mean() - 8.80) < 0.01                     # the README's figures
    assert not np.array_equal(mocap(seed=1, path=mocap_file).X_train, d.X_train)


def test_splits_and_refusals(small_file, monkeypatch):
    path, Y = small_file
    monkeypatch.setenv("PIDKL_MOCAP", str(path.parent))          # a folder works too
    d = mocap(seed=3, n_train=10, n_test=15)
    assert d.X_train.shape == (10, 1) and d.X_test.shape == (15, 1)
    early = mocap(split="early")
    # first half of each trial: frames 0-4, 10-15, 22-25
    assert list(early.X_train[:, 0].astype(int)) == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 15,
                                                     22, 23, 24, 25]
    with pytest.raises(ValueError, match="constant"):
        mocap(channel=59)
    with pytest.raises(ValueError, match="channel"):
        mocap(channel=62)
    with pytest.raises(ValueError, match="split"):
        mocap(split="late")
    with pytest.raises(ValueError, match="n_train"):
        mocap(n_train=20, n_test=20)
    bad = path.parent / "bad.mat"
    bad.write_bytes(b"not a mat file")
    with pytest.raises(ValueError, match="bad.mat"):
        datasets.load_mocap(bad)


def test_missing_file_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PIDKL_MOCAP", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="GPmat"):
        mocap()


def test_experiment_runs(mocap_file):
    from pyro_pidkl.paper.reproduce import run_one
    rec = run_one("mocap", "skl", 0, num_steps=5)
    assert rec["experiment"] == "mocap" and rec["rmse"] > 0
    assert rec["nrmse_mean"] == pytest.approx(rec["rmse"] / 8.8, rel=0.05)
