r"""CMU motion capture, subject 35, walk and jog (the paper's motion-capture experiment).

``cmu35WalkJog.mat`` (the SheffieldML GPmat packaging of the CMU database: ``Y`` 2,644 frames
x 62 joint-angle channels of 31 trials concatenated, ``lbls`` one-hot trial membership). The
paper predicts one channel from time with the first-order ODE as the physics, 500 random
frames for training and 2,000 for test per repeat. Channel 59 (0-based) is constant, so the
paper's "joint 60" is column 60 (mean 8.80, sd 2.45). Time is the frame index, the only
clock the file has.

The library ships no copy: pass the file or its folder, or set ``PIDKL_MOCAP``.
"""

import os
from pathlib import Path

import numpy as np

from .base import Dataset

__all__ = ["find_mocap", "load_mocap", "mocap"]

FILE = "cmu35WalkJog.mat"
SPLITS = ("random", "early")

_HOW_TO_GET = (
    f"The motion-capture file {FILE} was not found. Get it from the SheffieldML GPmat "
    "toolbox's datasets (datasets/data/cmu35WalkJog.mat; the CMU Graphics Lab Motion Capture "
    "Database, subject 35) and pass its path or folder (path=... or --data), or set "
    "PIDKL_MOCAP to it.")


def find_mocap(path=None):
    """Path of ``cmu35WalkJog.mat``: ``path`` (a file or a folder), else ``$PIDKL_MOCAP``,
    else ``shared/data/mocap`` under the working directory or a parent of it.

    :raises FileNotFoundError: saying how to get the file.
    """
    given = path if path is not None else os.environ.get("PIDKL_MOCAP")
    if given:
        p = Path(given).expanduser()
        p = p / FILE if p.is_dir() else p
        if not p.is_file():
            raise FileNotFoundError(f"No motion-capture file at {p}. {_HOW_TO_GET}")
        return p
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        p = d / "shared" / "data" / "mocap" / FILE
        if p.is_file():
            return p
    raise FileNotFoundError(_HOW_TO_GET)


def load_mocap(path=None):
    """``(Y (2644, 62), trial (2644,))``: the channels and each frame's trial index."""
    import scipy.io
    from scipy.io.matlab import MatReadError
    p = find_mocap(path)
    try:
        d = scipy.io.loadmat(p)
        Y, lbls = np.asarray(d["Y"], dtype=np.float64), np.asarray(d["lbls"])
    except (MatReadError, ValueError, KeyError, OSError, NotImplementedError) as e:
        raise ValueError(f"Could not read {p} as the motion-capture file (keys Y, lbls): "
                         f"{type(e).__name__}: {e}") from None
    if Y.ndim != 2 or lbls.shape[0] != Y.shape[0]:
        raise ValueError(f"Expected Y (frames, channels) and lbls (frames, trials) in {p}; got "
                         f"{Y.shape} and {lbls.shape}")
    return Y, lbls.argmax(1)


def mocap(seed=0, split="random", channel=60, n_train=500, n_test=2000, early_fraction=0.5,
          path=None):
    r"""One motion-capture task: channel ``channel`` against time ``t`` (the frame index).

    :param int seed: the random split's seed.
    :param str split: ``"random"`` (the paper: ``n_train`` random frames for training,
        ``n_test`` others for test) or ``"early"`` (the first ``early_fraction`` of each
        trial's frames for training, the rest for test: predicting later motion).
    :param int channel: the 0-based column of ``Y`` (default 60, the paper's joint 60).
    :returns: a :class:`~pyro_pidkl.datasets.base.Dataset` with input ``t``.
    """
    if split not in SPLITS:
        raise ValueError(f"Expected split to be one of {SPLITS}; got {split!r}")
    Y, trial = load_mocap(path)
    if not (isinstance(channel, (int, np.integer)) and 0 <= channel < Y.shape[1]):
        raise ValueError(f"Expected channel to be an integer in 0..{Y.shape[1] - 1}; got "
                         f"{channel!r}")
    y = Y[:, channel]
    if np.ptp(y) == 0:
        raise ValueError(f"Channel {channel} is constant ({y[0]:g}) in every frame: nothing to "
                         "predict (the paper's joint 60 is channel 60; 59 is constant)")
    t = np.arange(Y.shape[0], dtype=np.float64)[:, None]
    if split == "random":
        if n_train + n_test > Y.shape[0] or n_train < 1 or n_test < 1:
            raise ValueError(f"Expected n_train + n_test <= {Y.shape[0]} frames (both >= 1); "
                             f"got {n_train} + {n_test}")
        order = np.random.default_rng(seed).permutation(Y.shape[0])
        tr, te = np.sort(order[:n_train]), np.sort(order[n_train:n_train + n_test])
    else:
        if not 0 < early_fraction < 1:
            raise ValueError(f"Expected 0 < early_fraction < 1; got {early_fraction}")
        first = np.zeros(Y.shape[0], dtype=bool)
        for k in np.unique(trial):
            idx = np.flatnonzero(trial == k)
            first[idx[:max(1, int(round(early_fraction * idx.size)))]] = True
        tr, te = np.flatnonzero(first), np.flatnonzero(~first)
    return Dataset(name=f"mocap-ch{channel}-{split}", X_train=t[tr], y_train=y[tr],
                   X_test=t[te], y_test=y[te], input_names=("t",),
                   description=f"CMU subject 35 walk/jog, channel {channel} against the frame "
                               f"index; split {split!r}")
