"""Loaders of the ``.mat`` files shipped with the paper's code (paths given by the user)."""

from pathlib import Path

import numpy as np
from scipy.io import loadmat

from .base import Dataset

__all__ = ["PAPER_FOLD_INPUTS", "find_fold", "load_mat_fold", "load_paper_fold",
           "load_reference_diffusion", "load_reference_ode"]

#: the columns of the paper's published fold files, by task. The paper's "Cd" folds hold
#: (x, y, Cd, Ni) with Zn as the target (a mislabel in the paper's code, kept visible here)
PAPER_FOLD_INPUTS = {"jura-cd": ("x", "y", "Cd", "Ni"), "jura-cu": ("x", "y", "Pb", "Ni", "Zn"),
                     "pm25": ("lon", "lat", "t")}
_TARGETS = {"jura-cd": "Zn", "jura-cu": "Cu", "pm25": "PM2.5"}


def _load(path, keys):
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such data file: {path}")
    try:
        data = loadmat(path)
    except (ValueError, TypeError, OSError, NotImplementedError) as e:
        raise ValueError(f"Expected {path} to be a MATLAB .mat file with {list(keys)}; it cannot "
                         f"be read ({str(e).splitlines()[0]})") from None
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


def find_fold(path, fold):
    """The fold file ``fold`` (1-based) in folder ``path`` as the paper's code names it
    (``f{fold}.mat``) or as this library's reference copies do (``fold{fold}.mat``); ``path``
    may also be the file itself. ``None`` when the folder has neither."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    for name in (f"f{fold}.mat", f"fold{fold}.mat"):
        if (p / name).is_file():
            return p / name
    return None


def load_paper_fold(path, task, fold=1):
    """Fold ``fold`` of the paper's published files for ``task`` (``"jura-cd"``,
    ``"jura-cu"``, ``"pm25"``), with its columns named (:data:`PAPER_FOLD_INPUTS`).

    :raises FileNotFoundError: naming the folder and the file names looked for.
    :raises ValueError: when the file's columns do not match the task's layout.
    """
    if task not in PAPER_FOLD_INPUTS:
        raise ValueError(f"Expected task to be one of {tuple(PAPER_FOLD_INPUTS)}; got {task!r}")
    f = find_fold(path, fold)
    if f is None:
        raise FileNotFoundError(f"No fold {fold} in {path}: expected f{fold}.mat or "
                                f"fold{fold}.mat (X_train, Y_train, X_test, Y_test)")
    names = PAPER_FOLD_INPUTS[task]
    d = load_mat_fold(f, name=f"{task}-fold{fold} (target {_TARGETS[task]})")
    if d.X_train.shape[1] != len(names):
        raise ValueError(f"Expected {len(names)} columns {names} in {f} for {task}; got "
                         f"{d.X_train.shape[1]}")
    d.input_names = names
    return d


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
