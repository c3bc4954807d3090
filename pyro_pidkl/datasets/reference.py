"""Loaders of the ``.mat`` files shipped with the paper's code (paths given by the user)."""

from pathlib import Path

import numpy as np
from scipy.io import loadmat

from .base import Dataset

__all__ = ["load_mat_fold", "load_reference_diffusion", "load_reference_ode"]


def _load(path, keys):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}")
    data = loadmat(path)
    missing = [k for k in keys if k not in data]
    if missing:
        have = sorted(k for k in data if not k.startswith("__"))
        raise KeyError(f"{path} lacks {missing}; it holds {have}")
    return data


def load_mat_fold(path, input_names=None, name=None):
    """A fold file with ``X_train, Y_train, X_test, Y_test`` as a :class:`Dataset`."""
    data = _load(path, ("X_train", "Y_train", "X_test", "Y_test"))
    d = np.asarray(data["X_train"]).shape[1]
    names = tuple(input_names) if input_names else tuple(f"x{j}" for j in range(d))
    return Dataset(name or Path(path).stem, data["X_train"], data["Y_train"], data["X_test"],
                   data["Y_test"], names)


def load_reference_ode(path):
    """``ode_extrap.mat`` (``train``, ``test``: columns t, y) as a :class:`Dataset`."""
    data = _load(path, ("train", "test"))
    tr, te = np.asarray(data["train"]), np.asarray(data["test"])
    return Dataset("1stODE-reference", tr[:, :1], tr[:, 1], te[:, :1], te[:, 1], ("t",))


def load_reference_diffusion(path):
    """``diffusion_1d.mat``: the full grid (``X``: x, t; ``Y``) as test data and the shipped
    training slice (``xtr_t15``, ``ytr_t15``; note its values are those of t = 0.51)."""
    data = _load(path, ("X", "Y", "xtr_t15", "ytr_t15"))
    return Dataset("1dDiffusion-reference", data["xtr_t15"], data["ytr_t15"], data["X"],
                   data["Y"], ("x", "t"))
