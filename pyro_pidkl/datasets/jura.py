r"""Swiss Jura heavy-metal data (Goovaerts 1997), read from the R package gstat's
``data/jura.rda`` with the PyPI package ``rdata`` (no R needed).

359 locations: gstat's ``prediction.dat`` (259) and ``validation.dat`` (100), columns
``Xloc, Yloc`` (km), ``Landuse, Rock, Cd, Co, Cr, Cu, Ni, Pb, Zn`` (mg/kg). The paper's tasks:

* ``Cd`` from :math:`(x, y, \mathrm{Ni}, \mathrm{Zn})`;
* ``Cu`` from :math:`(x, y, \mathrm{Pb}, \mathrm{Ni}, \mathrm{Zn})`;

50 random training locations (by seed), the other 309 for test; the physics is a Poisson
equation over :math:`(x, y)` with an unknown source.

The paper's code ships folds labelled "Cd" whose target is in fact Zn with inputs
:math:`(x, y, \mathrm{Cd}, \mathrm{Ni})`; we do not copy that mislabel (a test shows it).
"""

import glob
import os
from pathlib import Path

import numpy as np

from .base import Dataset
from .reference import find_fold, load_paper_fold

__all__ = ["JURA_TASKS", "find_jura", "jura", "load_jura"]

#: target -> covariates (besides the coordinates x, y)
JURA_TASKS = {"Cd": ("Ni", "Zn"), "Cu": ("Pb", "Ni", "Zn")}

_COLUMNS = ("Xloc", "Yloc", "Cd", "Co", "Cr", "Cu", "Ni", "Pb", "Zn")

_HOW_TO_GET = (
    "gstat's jura.rda was not found. Get it with one of:\n"
    "  * Debian/Ubuntu: sudo apt-get install r-cran-gstat   "
    "(installs /usr/lib/R/site-library/gstat/data/jura.rda)\n"
    "  * any R: install.packages('gstat'), then the file is <R library>/gstat/data/jura.rda\n"
    "  * https://cran.r-project.org/package=gstat (the source tarball holds data/jura.rda)\n"
    "and pass its path (path=... or --data), or set PIDKL_JURA to it.")


def _r_library_dirs():
    dirs = []
    for var in ("R_LIBS", "R_LIBS_USER", "R_LIBS_SITE"):
        dirs += [d for d in os.environ.get(var, "").split(os.pathsep) if d]
    dirs += ["/usr/lib/R/site-library", "/usr/lib/R/library", "/usr/local/lib/R/site-library",
             "/usr/local/lib/R/library", "/opt/homebrew/lib/R/library"]
    dirs += sorted(glob.glob(os.path.expanduser("~/R/*/*")))
    dirs += sorted(glob.glob("/Library/Frameworks/R.framework/Versions/*/Resources/library"))
    return dirs


def find_jura(path=None):
    """The path of ``jura.rda``: ``path``, else ``$PIDKL_JURA``, else the usual R library
    folders (``$R_LIBS*``, Debian's, Homebrew's, ``~/R``).

    :raises FileNotFoundError: with instructions to get the file.
    """
    if path is not None or os.environ.get("PIDKL_JURA"):
        p = Path(path if path is not None else os.environ["PIDKL_JURA"]).expanduser()
        if p.is_dir():
            p = p / "jura.rda"
        if not p.is_file():
            raise FileNotFoundError(f"No jura.rda at {p}.\n{_HOW_TO_GET}")
        return p
    for d in _r_library_dirs():
        p = Path(d) / "gstat" / "data" / "jura.rda"
        if p.is_file():
            return p
    raise FileNotFoundError(_HOW_TO_GET)


def load_jura(path=None):
    """All 359 locations as ``{column: (359,) array}`` for ``Xloc, Yloc, Cd, ..., Zn``."""
    import rdata

    p = find_jura(path)
    tables = rdata.read_rda(str(p))
    missing = [k for k in ("prediction.dat", "validation.dat") if k not in tables]
    if missing:
        raise KeyError(f"{p} lacks {missing}; it holds {sorted(tables)}")
    frames = [tables["prediction.dat"], tables["validation.dat"]]
    return {c: np.concatenate([np.asarray(f[c], dtype=np.float64) for f in frames])
            for c in _COLUMNS}


def jura(target="Cd", seed=0, n_train=50, path=None):
    """A Jura task: ``target`` from the coordinates and its covariates (:data:`JURA_TASKS`),
    ``n_train`` random training locations chosen by ``seed``, the rest for test.

    Inputs are named ``x, y`` (km) and the covariates' names. When ``path`` (or
    ``PIDKL_JURA``) is a folder of the paper's fold files (``f1.mat`` .. ``f5.mat``, or
    ``fold1.mat`` ..), seed ``k`` reads fold ``k + 1`` instead, its columns named by
    :data:`~pyro_pidkl.datasets.reference.PAPER_FOLD_INPUTS` (the paper's "Cd" folds predict
    Zn from x, y, Cd, Ni).
    """
    if target not in JURA_TASKS:
        raise ValueError(f"Unknown Jura target {target!r}; expected one of {sorted(JURA_TASKS)}")
    given = path if path is not None else os.environ.get("PIDKL_JURA")
    if given and Path(given).expanduser().is_dir() and find_fold(given, 1) is not None:
        # a folder of the paper's published folds (f1.mat .. f5.mat): seed k reads fold k + 1
        return load_paper_fold(given, f"jura-{target.lower()}", seed % 5 + 1)
    data = load_jura(path)
    names = ("x", "y") + JURA_TASKS[target]
    X = np.stack([data["Xloc"], data["Yloc"]] + [data[c] for c in JURA_TASKS[target]], 1)
    y = data[target]
    n = len(y)
    if not 0 < n_train < n:
        raise ValueError(f"Expected 0 < n_train < {n}; got {n_train}")
    perm = np.random.default_rng(seed).permutation(n)
    tr, te = perm[:n_train], perm[n_train:]
    return Dataset(f"Jura-{target}", X[tr], y[tr], X[te], y[te], names,
                   description=f"Swiss Jura: {target} from {names}; {n_train} random training "
                               f"locations (seed {seed}), {n - n_train} for test")
