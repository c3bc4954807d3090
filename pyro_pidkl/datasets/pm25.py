r"""PM2.5 in Salt Lake City, July 2018 (the paper's Sec. 6): fold files ``foldK.mat`` with
``X_train, Y_train, X_test, Y_test``; inputs longitude, latitude (degrees) and time
(minutes); physics :math:`f_t - \alpha(f_{xx} + f_{yy}) = g` with an unknown source.

Only the fold files the user has can be read; the library ships none. With one fold (as in
``data/reference/pm25/fold1.mat``) :func:`pm25` pools its points and draws random splits of
the same sizes by seed, so that runs over several seeds measure the spread.
"""

import os
from pathlib import Path

import numpy as np

from .base import Dataset
from .reference import find_fold, load_mat_fold

__all__ = ["PM25_INPUTS", "find_pm25", "load_pm25_fold", "pm25"]

PM25_INPUTS = ("lon", "lat", "t")

_HOW_TO_GET = (
    "No PM2.5 fold file found. Pass the folder or file holding fold1.mat (path=... or --data) "
    "or set PIDKL_PM25 to it; the files are those shipped with the paper's code "
    "(X_train, Y_train, X_test, Y_test; columns longitude, latitude, minutes).")


def find_pm25(path=None, fold=1):
    """Path of ``fold{fold}.mat``: ``path`` (a file or a folder), else ``$PIDKL_PM25``, else
    ``shared/data/reference/pm25`` under the working directory or a parent of it.

    :raises FileNotFoundError: saying how to provide it.
    """
    name = f"fold{fold}.mat"
    given = path if path is not None else os.environ.get("PIDKL_PM25")
    if given:
        p = Path(given).expanduser()
        found = find_fold(p, fold)            # the paper's f{fold}.mat or fold{fold}.mat
        if found is None:
            raise FileNotFoundError(f"No PM2.5 file f{fold}.mat or {name} at {p}. "
                                    f"{_HOW_TO_GET}")
        return found
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        p = d / "shared" / "data" / "reference" / "pm25" / name
        if p.is_file():
            return p
    raise FileNotFoundError(_HOW_TO_GET)


def load_pm25_fold(path=None, fold=1):
    """One fold file as a :class:`Dataset` with inputs ``lon, lat, t``."""
    return load_mat_fold(find_pm25(path, fold), PM25_INPUTS, name=f"PM2.5-fold{fold}")


def pm25(seed=0, path=None, fold=1, n_train=None):
    """A PM2.5 task: the fold's points pooled and split at random by ``seed`` into
    ``n_train`` (default: the fold's own training size) training points and the rest."""
    d = load_pm25_fold(path, fold)
    X = np.concatenate([d.X_train, d.X_test])
    y = np.concatenate([d.y_train, d.y_test])
    n_train = len(d.y_train) if n_train is None else int(n_train)
    if not 0 < n_train < len(y):
        raise ValueError(f"Expected 0 < n_train < {len(y)}; got {n_train}")
    perm = np.random.default_rng(seed).permutation(len(y))
    tr, te = perm[:n_train], perm[n_train:]
    return Dataset("PM2.5", X[tr], y[tr], X[te], y[te], PM25_INPUTS,
                   description=f"PM2.5 Salt Lake City (fold {fold} pooled, split by seed "
                               f"{seed}: {n_train} train, {len(y) - n_train} test)")
