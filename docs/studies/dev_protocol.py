"""Choose the simulations' PI-DKL protocol on development twins, not on the paper's tasks.

``ode-dev`` and ``diffusion-dev`` (``pyro_pidkl/paper/experiments.py``) are other instances of the
1stODE and 1dDiffusion tasks: same equation, initial values, training design and test
design, another source / coefficients / initial condition. Their test sets may be looked at.
Each candidate protocol below runs on a twin over seeds 0-4 (the way ``pidkl reproduce``
runs, final iterate); the rule that picks the protocol for the paper's task was fixed before
any candidate ran:

    among the candidates whose median 95% coverage lies in [0.80, 0.99], the lowest median
    RMSE; if none does, the highest median test log predictive density.

    python docs/studies/dev_protocol.py [--tasks ode-dev,diffusion-dev] [--jobs 2] \\
        > docs/results/dev_protocol.jsonl
    python docs/studies/dev_protocol.py --tasks ode-dev2 > docs/results/dev_protocol_ode_dev2.jsonl

(``ode-dev2`` was added after the choice, to see whether it holds on a second 1stODE twin.)
"""

import argparse
import dataclasses
import json
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

#: candidate -> (protocol overrides, PI-DKL options); "cv" keeps the paper's gamma grid and
#: the experiment's cross-validation, every other candidate is one fixed configuration
#: (the run that chose ``TWIN_CHOICE`` expressed the fixed ones as one-point grids; same fits)
CANDIDATES = {
    "cv-m10": ({"fixed": None}, {}),
    "g1-m10": ({"fixed": {"gamma": 1.0, "m": 10}}, {}),
    "g1-m30": ({"fixed": {"gamma": 1.0, "m": 30}}, {}),
    "g1-m100": ({"fixed": {"gamma": 1.0, "m": 100}}, {}),
    "g1-m10-skip": ({"fixed": {"gamma": 1.0, "m": 10}}, {"skip_inputs": True}),
    "g1-m100-skip": ({"fixed": {"gamma": 1.0, "m": 100}}, {"skip_inputs": True}),
}


def register(task, candidate):
    """Put ``task`` under ``candidate``'s protocol into ``EXPERIMENTS``; returns its name."""
    from pyro_pidkl.paper.experiments import EXPERIMENTS
    proto, kwargs = CANDIDATES[candidate]
    base = EXPERIMENTS[task]
    name = f"{task}:{candidate}"
    EXPERIMENTS[name] = dataclasses.replace(
        base, name=name, protocol=dataclasses.replace(base.protocol, **proto),
        pidkl_kwargs={**base.pidkl_kwargs, **kwargs})
    return name


def run(task, candidate, seed):
    import torch
    from pyro_pidkl.paper.reproduce import run_one
    torch.set_num_threads(1)
    r = run_one(register(task, candidate), "pidkl", seed)
    return {k: r[k] for k in ("rmse", "crps", "coverage95", "test_lpd", "fit_seconds")} | {
        "gamma": r["hyper"].get("gamma"), "m": r["hyper"].get("m"),
        "learned": r["hyper"].get("learned")}


def summary_row(task, candidate, seeds, rs, keys):
    """One candidate on one task: the median and the per-seed values of each of ``keys``
    over the seeds' results ``rs``, with the gamma and learned parameters of each seed."""
    row = {"task": task, "candidate": candidate, "seeds": seeds}
    for key in keys:
        v = np.array([r[key] for r in rs], dtype=float)
        row[f"median_{key}"] = float(np.median(v))
        row[key] = v.round(4).tolist()
    row["gamma"] = [r["gamma"] for r in rs]
    row["learned"] = [r["learned"] for r in rs]
    return row


def twin_args(description, tasks, seeds, argv=None, **lists):
    """The twin scripts' command line: ``--tasks``, any comma-separated ``lists`` (e.g.
    ``candidates``), ``--seeds`` and ``--jobs``. Returns ``(args, tasks, seeds)``, the
    last two parsed into a list of names and a list of ints."""
    p = argparse.ArgumentParser(description=description.splitlines()[0])
    p.add_argument("--tasks", default=",".join(tasks))
    for name, default in lists.items():
        p.add_argument(f"--{name}", default=",".join(default))
    p.add_argument("--seeds", default=seeds)
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args(argv)
    return a, a.tasks.split(","), [int(s) for s in a.seeds.split(",")]


def run_jobs(fn, jobs, processes):
    """``[fn(*job) for job in jobs]`` on ``processes`` processes, in the jobs' order."""
    with ProcessPoolExecutor(processes) as pool:
        return list(pool.map(fn, *zip(*jobs)))


def print_choice(summary, options, rule, start):
    """Apply the twins' mean-rank rule (:func:`pyro_pidkl.infer.selection.mean_rank_choice`) to
    ``summary[task][option]`` (median test CRPS), print the choice as a JSON line with
    ``rule`` and the seconds since ``start``, and return ``(chosen, mean_rank)``."""
    from protocol_rules import mean_rank_choice
    chosen, mean_rank = mean_rank_choice(summary, options)
    print(json.dumps({"chosen": chosen, "mean_rank": mean_rank, "rule": rule,
                      "wall_seconds": round(time.time() - start, 1)}), flush=True)
    return chosen, mean_rank


def choose(rows):
    """The pre-declared rule (module docstring) over one task's summary rows."""
    ok = [r for r in rows if 0.80 <= r["median_coverage95"] <= 0.99]
    if ok:
        return min(ok, key=lambda r: r["median_rmse"])["candidate"]
    return max(rows, key=lambda r: r["median_test_lpd"])["candidate"]


def main():
    a, tasks, seeds = twin_args(__doc__, ("ode-dev", "diffusion-dev"), "0,1,2,3,4",
                                candidates=CANDIDATES)
    cands = a.candidates.split(",")
    jobs = [(t, c, s) for t in tasks for c in cands for s in seeds]
    start = time.time()
    results = run_jobs(run, jobs, a.jobs)
    summary = {}
    for (t, c, s), r in zip(jobs, results):
        summary.setdefault((t, c), []).append(r)
    for t in tasks:
        rows = []
        for c in cands:
            row = summary_row(t, c, seeds, summary[(t, c)],
                              ("rmse", "coverage95", "test_lpd", "fit_seconds"))
            rows.append(row)
            print(json.dumps(row), flush=True)
        print(json.dumps({"task": t, "chosen": choose(rows),
                          "rule": "median cov95 in [0.80, 0.99] -> lowest median RMSE; "
                                  "else highest median test LPD",
                          "wall_seconds": round(time.time() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
