r"""Model selection on training data only: k-fold or held-back-slice cross-validation.

The paper's code kept the epoch with the best *test* error; here every choice (gamma, m,
steps, ...) is made from the training data: each configuration of a grid is fitted on each
training split and scored on its validation part, and the configuration with the best mean
score wins. Configurations run on several processes with ``jobs > 1``.
"""

import itertools
import math
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
import multiprocessing

import numpy as np
import pyro
import torch

from ..checks import as_inputs, as_targets, positive_int
from .svi import fit
from .workers import worker_init
from ..diagnostics.metrics import rmse, test_log_predictive_density

__all__ = ["CVResult", "cross_validate", "grid_configs", "holdout_split", "kfold_splits"]

PAPER_GAMMA_GRID = (0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10)


def kfold_splits(n, k=5, seed=0):
    """``k`` random folds of ``range(n)`` as ``[(train_idx, val_idx), ...]``."""
    k = positive_int(k, "k (folds)", minimum=2)
    if k > n:
        raise ValueError(f"Expected 2 <= k <= n ({n}) folds; got {k!r}")
    perm = np.random.default_rng(seed).permutation(n)
    folds = np.array_split(perm, int(k))
    return [(np.sort(np.concatenate(folds[:i] + folds[i + 1:])), np.sort(folds[i]))
            for i in range(int(k))]


def holdout_split(X, column=0, fraction=0.2):
    """Hold back the last ``fraction`` of the training points along input ``column``
    (extrapolation tasks: validate beyond the fitted region, as the test set lies)."""
    X = np.asarray(X, dtype=np.float64).reshape(len(X), -1)
    if not 0 < fraction < 1:
        raise ValueError(f"Expected 0 < fraction < 1; got {fraction}")
    order = np.argsort(X[:, column], kind="stable")
    n_val = max(1, int(round(fraction * len(order))))
    if n_val >= len(order):
        raise ValueError(f"Holding back {n_val} of {len(order)} points leaves none to train on")
    return [(np.sort(order[:-n_val]), np.sort(order[-n_val:]))]


@dataclass
class CVResult:
    """``best``: the winning configuration; ``table``: one row per configuration with the
    mean and per-split validation scores (``rmse``, ``lpd``) and failures."""

    best: dict
    score: str
    table: list = field(default_factory=list)

    def __repr__(self):
        return f"CVResult(best={self.best}, score={self.score!r}, configs={len(self.table)})"


def _run_one(build, X, y, train_idx, val_idx, hyper, fit_kwargs, threads):
    if threads:
        torch.set_num_threads(threads)
    pyro.set_rng_seed(fit_kwargs.get("seed") or 0)  # same model init in any process
    try:
        model = build(X[train_idx], y[train_idx], **hyper)
        fit(model, progress=False, **fit_kwargs)
        mean, var = model(X[val_idx], noiseless=False)
        return {"rmse": rmse(mean, y[val_idx]),
                "lpd": test_log_predictive_density(mean, var, y[val_idx]), "error": None}
    except Exception as e:  # a diverged configuration loses, it does not stop the search
        return {"rmse": math.inf, "lpd": -math.inf, "error": f"{type(e).__name__}: {e}"}


def grid_configs(grid):
    """Every configuration of ``grid`` (``{name: [values]}``), as dicts, in grid order."""
    return [dict(zip(grid, vals)) for vals in itertools.product(*grid.values())]


def cross_validate(build, X, y, grid, splits=None, score="rmse", jobs=1, fit_kwargs=None):
    r"""Choose hyperparameters by cross-validation on the training data.

    :param build: ``build(X_train, y_train, **config) -> model`` (a fresh model each call; a
        module-level function or ``functools.partial`` when ``jobs > 1``).
    :param X: ``(N, d)`` training inputs. :param y: ``(N,)`` training targets.
    :param dict grid: ``{name: [values]}``; every combination is tried.
    :param splits: ``[(train_idx, val_idx), ...]``; default 5-fold (:func:`kfold_splits`).
    :param str score: ``"rmse"`` (lower wins) or ``"lpd"`` (held-out log density, higher wins).
    :param int jobs: processes (1 runs in this process).
    :param dict fit_kwargs: passed to :func:`~pyro_pidkl.infer.svi.fit` (num_steps, lr, seed, ...);
        ``seed`` (default 0) also seeds each model's construction, so that a configuration
        scores the same in any process.
    :returns: :class:`CVResult`.
    """
    if score not in ("rmse", "lpd"):
        raise ValueError(f"Expected score 'rmse' or 'lpd'; got {score!r}")
    if not grid or any(len(v) == 0 for v in grid.values()):
        raise ValueError(f"Expected a non-empty grid of non-empty value lists; got {grid!r}")
    Xt, _ = as_inputs(X)
    X, y = Xt.numpy(), as_targets(y, Xt.shape[0]).numpy()
    splits = splits if splits is not None else kfold_splits(len(y), min(5, len(y)))
    configs = grid_configs(grid)
    fit_kwargs = dict(fit_kwargs or {})
    tasks = [(c, s) for c in configs for s in splits]
    jobs = positive_int(jobs, "jobs")
    if jobs == 1:
        outs = [_run_one(build, X, y, tr, va, c, fit_kwargs, 0) for c, (tr, va) in tasks]
    else:   # one torch thread per worker: several threads each on few cores slow down 5-15x
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=worker_init,
                                 initargs=(1,)) as pool:
            futures = [pool.submit(_run_one, build, X, y, tr, va, c, fit_kwargs, 1)
                       for c, (tr, va) in tasks]
            outs = [f.result() for f in futures]
    table = []
    for i, config in enumerate(configs):
        rows = outs[i * len(splits):(i + 1) * len(splits)]
        table.append({"config": config,
                      "rmse": float(np.mean([r["rmse"] for r in rows])),
                      "lpd": float(np.mean([r["lpd"] for r in rows])),
                      "per_split": rows,
                      "errors": [r["error"] for r in rows if r["error"]]})
    key = (lambda r: r["rmse"]) if score == "rmse" else (lambda r: -r["lpd"])
    finite = [r for r in table if math.isfinite(key(r))]
    if not finite:
        raise RuntimeError("Every configuration failed in cross-validation: "
                           + "; ".join(table[0]["errors"][:3]))
    best = min(finite, key=key)  # first of ties, in grid order
    return CVResult(best=dict(best["config"]), score=score, table=table)
