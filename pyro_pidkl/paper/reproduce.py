"""Running an experiment honestly: cross-validation on training data, several seeds, the
final iterate, calibrated scores; records for ``results.json`` (their tables:
:mod:`~pyro_pidkl.paper.tables`)."""

import dataclasses
import functools
import json
import multiprocessing
import os
import signal
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pyro
import torch

from ..checks import is_count, positive_int
from ..diagnostics.arviz_tools import exact_loo, loo, to_datatree
from ..diagnostics.calibration import pit, predictive_scores
from ..infer.restarts import Ensemble, fit_restarts, restart_seed
from ..infer.selection import cross_validate, grid_configs, holdout_split, kfold_splits
from ..infer.svi import fit
from ..infer.workers import worker_init
from ..models import PhysicsConditionedGP, SparsePIDKL
from .experiments import (EXPERIMENTS, PCGP_METHODS, RESTART_METHODS, VARIANT_CONFIG, VARIANTS,
                          build_model)
from .record_files import (_append_record, _check_writable, _record_key, _write_json_atomic,
                           read_records)
from .tables import calibration_markdown, format_table, markdown_table, summarize

__all__ = ["calibration_markdown", "format_table", "markdown_table", "read_records", "reproduce",
           "run_one", "summarize"]        # the tables' names re-exported from .tables


def _build_for_cv(X, y, experiment_name, input_names, **config):
    return build_model("pidkl", EXPERIMENTS[experiment_name], X, y, input_names, **config)


def _fixed_config(experiment, method):
    """The PI-DKL configuration a method runs without cross-validation, or ``None``."""
    p = experiment.protocol
    if method in ("pidkl",) + RESTART_METHODS and p.fixed is not None:  # decided beforehand
        return dict(p.fixed)
    if method in VARIANTS:     # full-VI variants: fixed gamma and m, no cross-validation
        return dict(VARIANT_CONFIG)
    if method in ("pidkl", "pidkl-cv") and len(grid_configs(p.grid)) == 1:
        return grid_configs(p.grid)[0]   # a one-point grid: nothing to choose
    return None


def _cross_validated(experiment, method):
    """Whether ``method`` chooses gamma and m by cross-validation on the training data."""
    cv_method = method == "pidkl-cv" or (method == "pidkl" and experiment.protocol.fixed is None)
    return cv_method and _fixed_config(experiment, method) is None


def _splits(experiment, data, seed):
    p = experiment.protocol
    if p.cv == "holdout":
        column = data.input_names.index(p.cv_column)
        return holdout_split(data.X_train, column, p.cv_fraction)
    return kfold_splits(len(data.y_train), p.cv_folds, seed)


@functools.lru_cache(maxsize=1)
def _provenance():
    """What a record's numbers depend on besides the seed: the code (the git commit, with
    ``+`` for uncommitted changes, when run from a checkout), torch's version and the
    machine's CPU count (a stochastic fit's last digits change with the thread count and
    the build)."""
    import platform
    import subprocess
    from .. import __version__
    commit = None
    try:
        root = Path(__file__).resolve().parents[2]
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, text=True, capture_output=True).stdout.strip()
        commit = head + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    return {"commit": commit, "pyro_pidkl": __version__, "torch": torch.__version__,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs"}


def run_one(experiment_name, method, seed, num_steps=None, threads=0, keep_predictions=False,
            cv_score=None):
    """Select (``pidkl-cv``, and ``pidkl`` without a fixed configuration: gamma, m by CV on
    the training data), fit and score one run.

    ``cv_score`` (``"rmse"`` or ``"lpd"``) overrides the protocol's ``cv_score``;
    ``threads`` the fits' torch threads (0: :func:`~pyro_pidkl.infer.threads.fit_threads`'s
    ``"auto"``).

    :returns: a record ``{experiment, method, seed, rmse, nrmse, test_lpd, coverage95,
        fit_seconds, threads, hyper}`` (plus ``predictions`` when ``keep_predictions``).
    """
    experiment = EXPERIMENTS[experiment_name]
    p = experiment.protocol
    data = experiment.data(seed)
    steps = p.num_steps if num_steps is None else int(num_steps)
    # the paper's protocol trains with Adam for its steps, baselines included; the
    # conditioned GP (not the paper's) with its own default, L-BFGS
    fit_kwargs = dict(num_steps=steps, lr=p.lr, lr_final=p.lr_final,
                      num_particles=p.num_particles,
                      method="auto" if method in PCGP_METHODS else "adam",
                      threads=threads or "auto")
    hyper = {"steps": steps, "lr": p.lr, "lr_final": p.lr_final,
             "num_particles": p.num_particles}
    config = {}
    cv_seconds = 0.0
    if method in RESTART_METHODS and p.fixed is None:
        raise ValueError(f"Method {method!r} restarts the fixed PI-DKL configuration; "
                         f"experiment {experiment_name!r} has none (Protocol.fixed)")
    fixed = _fixed_config(experiment, method)
    if fixed is not None:
        config = fixed
        hyper.update(config, cv=None, initial=experiment.initial)
    elif _cross_validated(experiment, method):  # gamma and m by CV on the training data
        start = time.perf_counter()
        cv_steps = min(p.cv_steps or steps, steps)
        cv_score = cv_score or p.cv_score
        build = functools.partial(_build_for_cv, experiment_name=experiment_name,
                                  input_names=data.input_names)
        cv = cross_validate(build, data.X_train, data.y_train, p.grid,
                            splits=_splits(experiment, data, seed), score=cv_score,
                            fit_kwargs={**fit_kwargs, "num_steps": cv_steps, "seed": seed})
        config = cv.best
        cv_seconds = time.perf_counter() - start
        hyper.update(config, cv=p.cv, cv_score=cv_score, cv_steps=cv_steps,
                     cv_seconds=cv_seconds, cv_lpd={json.dumps(r["config"]): r["lpd"]
                                                    for r in cv.table},
                     cv_rmse={json.dumps(r["config"]): r["rmse"] for r in cv.table},
                     initial=experiment.initial)
    if method in RESTART_METHODS:
        model, result, restarts = _fit_restarts(method, experiment, data, config, seed,
                                                fit_kwargs)
        hyper.update(restarts)
    else:
        pyro.set_rng_seed(seed)
        model = build_model(method, experiment, data.X_train, data.y_train, data.input_names,
                            **config)
        result = fit(model, progress=False, **fit_kwargs)
    mean, var_f = model(data.X_test)
    _, var_y = model(data.X_test, noiseless=False)
    scores = predictive_scores(mean, var_y, data.y_test)
    exact = not isinstance(model, (SparsePIDKL, Ensemble, PhysicsConditionedGP))
    if exact:  # PSIS-LOO needs the exact GP posterior
        with warnings.catch_warnings():  # high Pareto k is recorded below, not printed
            warnings.filterwarnings("ignore", message="Estimated shape parameter of Pareto")
            loo_result = loo(to_datatree(model, data.X_test[:1], num_samples=1000, seed=seed))
    record = {"experiment": experiment_name, "method": method, "seed": seed,
              # nrmse: RMSE / sd of the test targets (the paper's code); relative_l2:
              # ||mu - y|| / ||y||; nrmse_mean: RMSE / mean of the test targets (the caption)
              "rmse": scores["rmse"], "nrmse": scores["nrmse"],
              "relative_l2": scores["relative_l2"],
              "nrmse_mean": scores["rmse"] / abs(float(np.mean(data.y_test))),
              "test_lpd": scores["test_lpd"],
              "crps": scores["crps"], "coverage95": scores["coverage"][0.95],
              "fit_seconds": result.seconds, "threads": result.threads, "hyper": hyper,
              **_provenance(),
              "coverage": {str(k): v for k, v in scores["coverage"].items()},
              "pit_ks_pvalue": scores["pit_ks_pvalue"],
              "loo_elpd": float(loo_result.elpd) if exact else None,
              "loo_elpd_exact": exact_loo(model)[2] if exact else None,
              "loo_high_pareto_k": (int((np.asarray(loo_result.pareto_k) > 0.7).sum())
                                    if exact else None)}
    hyper["noise_variance"] = model.noise_variance()
    hyper["final_loss"] = result.final_loss
    learned = model.equation_parameters() if hasattr(model, "equation_parameters") else {}
    if learned:
        hyper["learned"] = learned
        hyper["truth"] = data.truth
    physics = getattr(model, "physics", None)
    if physics is not None and physics.bayesian_sites:
        hyper["posterior"] = physics.equation_posterior()
    if keep_predictions:
        record["predictions"] = {"mean": mean.numpy(), "var_f": var_f.numpy(),
                                 "var_y": var_y.numpy()}
        if isinstance(model, Ensemble):
            record["predictions"]["members"] = [
                {"mean": mu.numpy(), "var_y": v.numpy()}
                for mu, v in (m(data.X_test, noiseless=False) for m in model.members)]
    return record


def _fit_restarts(method, experiment, data, config, seed, fit_kwargs):
    """``experiment.protocol.restarts`` PI-DKL fits at ``config`` (restart ``r`` seeded
    ``seed + 1000 r``; restart 0 is the single ``pidkl`` fit). ``pidkl-ens`` predicts with
    their moment-matched mixture, ``pidkl-best`` with the restart whose training objective
    (negative ELBO, 64 particles) is lowest: neither looks at held-out data.

    :returns: ``(model, fit_result, hyper)``; the fit result's seconds are the restarts' sum.
    """
    def build():
        return build_model("pidkl", experiment, data.X_train, data.y_train, data.input_names,
                           **config)

    ensemble, results, objectives = fit_restarts(
        build, experiment.protocol.restarts, seed=seed, progress=False, **fit_kwargs)
    best = int(np.argmin(objectives))
    model = ensemble if method == "pidkl-ens" else ensemble.members[best]
    result = dataclasses.replace(results[best], seconds=sum(r.seconds for r in results))
    hyper = {"restarts": len(results),
             "restart_seeds": [restart_seed(seed, r) for r in range(len(results))],
             "training_objectives": objectives, "best_restart": best,
             "restart_learned": [m.equation_parameters() for m in ensemble.members]}
    return model, result, hyper


def _task_key(experiment, method, seed, steps, cv_score):
    cv = ((cv_score or experiment.protocol.cv_score) if _cross_validated(experiment, method)
          else None)
    steps = experiment.protocol.num_steps if steps is None else int(steps)
    return (experiment.name, method, int(seed), steps, cv)


def reproduce(experiment_name, methods=None, seeds=None, num_steps=None, out="runs",
              jobs=1, progress=True, figures=True, cv_score=None, force=False, echo=print):
    """Run ``methods`` x ``seeds`` of an experiment into the folder ``out``.

    Each finished fit is appended to ``out/records.jsonl`` at once, and ``out/results.json``
    (every record of the folder, this run's merged with earlier ones by experiment, method,
    seed, steps and cross-validation score) is rewritten atomically after each fit: a run
    interrupted at any point, by Ctrl-C or a kill, keeps every fit it finished. A rerun skips
    the fits already recorded (``force=True`` redoes them). With ``jobs > 1`` the fits run
    in worker processes of one torch thread each, which die with the main process.
    ``cv_score`` overrides the protocol's cross-validation score (``"rmse"`` or ``"lpd"``).

    :returns: the records of the requested fits (recorded earlier or now).
    """
    from tqdm import tqdm

    if experiment_name not in EXPERIMENTS:
        raise ValueError(f"Unknown experiment {experiment_name!r}; expected one of "
                         f"{sorted(EXPERIMENTS)}")
    experiment = EXPERIMENTS[experiment_name]
    methods = list(methods or experiment.default_methods)
    if "lfm" in methods:  # every latent force model of the experiment
        i = methods.index("lfm")
        methods[i:i + 1] = [m for m in experiment.lfm if m not in methods]
    unknown = [m for m in methods if m not in experiment.methods]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown} for {experiment_name!r}; expected "
                         f"{experiment.methods}")
    seeds = list(experiment.protocol.seeds if seeds is None else seeds)
    if not seeds or not all(is_count(s, minimum=0) for s in seeds):
        raise ValueError(f"Expected seeds to be integers >= 0; got {seeds}")
    if num_steps is not None:
        num_steps = positive_int(num_steps, "the number of steps", minimum=0)
    jobs = positive_int(jobs, "jobs")
    if cv_score not in (None, "rmse", "lpd"):
        raise ValueError(f"Expected cv_score 'rmse' or 'lpd'; got {cv_score!r}")
    out = Path(out)
    _check_writable(out)
    existing = {_record_key(r): r for r in read_records(out)}   # fails now, not at the end
    log, path = out / "records.jsonl", out / "results.json"
    tasks = [(method, seed) for method in methods for seed in seeds]
    keys = {t: _task_key(experiment, t[0], t[1], num_steps, cv_score) for t in tasks}
    todo = [t for t in tasks if force or keys[t] not in existing]
    if len(todo) < len(tasks):
        echo(f"{len(tasks) - len(todo)} of {len(tasks)} fits already recorded in {out}: "
             f"skipped (--force redoes them)")
    keep = seeds[0]
    predictions = {}

    def finished(record):
        if "predictions" in record:
            predictions[record["method"]] = record.pop("predictions")
        _append_record(log, record)
        existing[_record_key(record)] = record
        _write_json_atomic(path, list(existing.values()))
        bar.update()
        bar.write(f"{experiment_name} {record['method']} seed {record['seed']}: RMSE "
                  f"{record['rmse']:.4g}, {record['fit_seconds']:.0f} s")

    bar = tqdm(total=len(todo), disable=not progress, desc=f"reproduce {experiment_name}")
    try:
        if jobs == 1 or len(todo) <= 1:
            for method, seed in todo:
                bar.set_postfix_str(f"running {method} seed {seed}")
                finished(run_one(experiment_name, method, seed, num_steps,
                                 keep_predictions=seed == keep, cv_score=cv_score))
        else:
            ctx = multiprocessing.get_context("spawn")
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                                       initializer=worker_init, initargs=(1,))
            try:
                # workers are born ignoring Ctrl-C (it reaches the whole process group; the
                # parent handles it): one interrupted while still importing, before its
                # initializer ran, printed a traceback
                main = threading.current_thread() is threading.main_thread()
                handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
                try:
                    futures = {pool.submit(run_one, experiment_name, method, seed, num_steps,
                                           1, seed == keep, cv_score): (method, seed)
                               for method, seed in todo}
                finally:
                    if main:
                        signal.signal(signal.SIGINT, handler)
                def running():
                    names = [f"{m} seed {s}" for f, (m, s) in futures.items() if f.running()]
                    bar.set_postfix_str("running " + ", ".join(names) if names else "")
                running()
                for f in as_completed(futures):
                    finished(f.result())
                    running()
            except BaseException:
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.kill()
                # wait for the executor to see its workers gone and close its queues: without
                # it their semaphores outlive the run ("leaked semaphore objects" on Ctrl-C)
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            pool.shutdown()
    finally:
        bar.close()
    wanted = {keys[t] for t in tasks}
    records = [r for k, r in existing.items() if k in wanted]
    order = {keys[t]: i for i, t in enumerate(tasks)}
    records.sort(key=lambda r: order[_record_key(r)])
    if figures and predictions:
        from ..diagnostics.plots import calibration, comparison, experiment_figure
        data = experiment.data(keep)
        note = _steps_note(experiment, num_steps)
        experiment_figure(experiment, data, predictions, out / f"{experiment_name}.png",
                          seed=keep, note=note)
        scores = {m: predictive_scores(p["mean"], p["var_y"], data.y_test)
                  for m, p in predictions.items()}
        pits = {m: pit(p["mean"], p["var_y"], data.y_test) for m, p in predictions.items()}
        calibration(scores, pits, out / f"{experiment_name}_calibration.png",
                    f"{experiment.description}: calibration on the test set (seed {keep})"
                    + note)
        comparison(summarize(records), out / f"{experiment_name}_comparison.png",
                   f"{experiment.description}: median and range over seeds {seeds}" + note)
    return records


def _steps_note(experiment, num_steps):
    """A mark for figures made with other than the protocol's number of steps."""
    if num_steps is None or int(num_steps) == experiment.protocol.num_steps:
        return ""
    return f" [{num_steps} steps, not the protocol's {experiment.protocol.num_steps}]"
