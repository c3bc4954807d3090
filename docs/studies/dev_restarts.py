"""Restarts of the declared PI-DKL configuration, compared on the development twins only.

The protocol of ``pidkl`` (``TWIN_CHOICE``: gamma = 1, m = 10, ``[phi(u), u]`` kernel) stays
as it was chosen; this asks only how to use R = 5 restarts of it (restart r seeded
``seed + 1000 r``, so restart 0 is the single ``pidkl`` fit):

* ``single``: restart 0 alone (what ``pidkl`` reports);
* ``ensemble``: the moment-matched mixture of the 5 (method ``pidkl-ens``);
* ``best``: the restart with the lowest training objective, the negative ELBO estimated
  with 64 particles at the final parameters (method ``pidkl-best``).

All three come from the same fits. The rule, fixed in this file before it first ran:

    on each twin (ode-dev, ode-dev2, diffusion-dev), rank the three by median test CRPS
    over seeds 0-4 (1 = lowest); choose the lowest mean rank over the three twins; ties go
    to single, then ensemble, then best. Only the chosen one runs on the paper's tasks.

CRPS rather than the log score: on ode-dev2 the log score preferred wide intervals around a
wrong mean (``docs/results/dev_protocol_ode_dev2.jsonl``); CRPS is proper too, in units of
y, and grows linearly with needless width.

    python docs/studies/dev_restarts.py > docs/results/dev_restarts.jsonl    # ~20 min, 2 jobs
"""

import json
import time

import numpy as np

COMBINATIONS = ("single", "ensemble", "best")
TASKS = ("ode-dev", "ode-dev2", "diffusion-dev")


def _with_twin_choice(task):
    """The twin runs ``TWIN_CHOICE``, as when this script chose (the simulations have run
    ``ODE_FAMILY_CHOICE`` and ``DIFFUSION_FAMILY_CHOICE`` since ``docs/studies/dev_family.py``
    and ``docs/studies/dev_diffusion_family.py``)."""
    import dataclasses

    from protocol_rules import TWIN_CHOICE
    from pyro_pidkl.paper.experiments import EXPERIMENTS
    e = EXPERIMENTS[task]
    EXPERIMENTS[task] = dataclasses.replace(
        e, protocol=dataclasses.replace(e.protocol, fixed=TWIN_CHOICE))


def run(task, seed):
    import torch
    torch.set_num_threads(1)
    _with_twin_choice(task)
    return score_restarts(task, seed)


def score_restarts(task, seed):
    """Fit ``pidkl-ens`` on ``task`` (its protocol's fixed configuration) and score the three
    ways of using the restarts on the test set: ``{"single": scores, "ensemble": ...}``."""
    from pyro_pidkl.diagnostics import predictive_scores
    from pyro_pidkl.paper.experiments import EXPERIMENTS
    from pyro_pidkl.paper.reproduce import run_one
    r = run_one(task, "pidkl-ens", seed, keep_predictions=True)
    members, mixture = r["predictions"]["members"], r["predictions"]  # the record: pidkl-ens
    best = r["hyper"]["best_restart"]
    predictive = {"single": (members[0]["mean"], members[0]["var_y"]),
                  "ensemble": (mixture["mean"], mixture["var_y"]),
                  "best": (members[best]["mean"], members[best]["var_y"])}
    y = EXPERIMENTS[task].data(seed).y_test
    out = {"task": task, "seed": seed, "best_restart": best,
           "training_objectives": r["hyper"]["training_objectives"],
           "restart_learned": r["hyper"]["restart_learned"],
           "fit_seconds": r["fit_seconds"]}
    for name, (mu, var) in predictive.items():
        s = predictive_scores(mu, var, y)
        out[name] = {"rmse": s["rmse"], "crps": s["crps"], "test_lpd": s["test_lpd"],
                     "coverage95": s["coverage"][0.95]}
    return out


def combination_rows(task, rs, seeds, combinations, prefix=""):
    """Print and return one summary row per use of the restarts (``combinations``) over
    the seeds' results ``rs`` of :func:`score_restarts` on ``task``: the medians of RMSE,
    CRPS, test LPD and 95% coverage, with RMSE and coverage per seed. Rows are labelled
    ``prefix + combination``."""
    rows = []
    for c in combinations:
        row = {"task": task, "candidate": prefix + c, "seeds": seeds}
        for k in ("rmse", "crps", "test_lpd", "coverage95"):
            row[f"median_{k}"] = float(np.median([r[c][k] for r in rs]))
        row["rmse"] = [round(r[c]["rmse"], 4) for r in rs]
        row["coverage95"] = [round(r[c]["coverage95"], 3) for r in rs]
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def crps_summary(results, tasks, seeds, combinations, groups=None):
    """Print the summary rows of :func:`combination_rows` for each task and return
    ``{task: {candidate: median test CRPS}}``, what the mean-rank rule reads.

    :param dict groups: ``{prefix: predicate}``: one set of rows per group of results
        (e.g. per m), their candidates named ``prefix + combination``; default one group
        of every result, unprefixed.
    """
    groups = groups or {"": lambda r: True}
    summary = {}
    for t in tasks:
        summary[t] = {}
        for prefix, keep in groups.items():
            rows = combination_rows(t, [r for r in results if r["task"] == t and keep(r)],
                                    seeds, combinations, prefix)
            summary[t].update({row["candidate"]: row["median_crps"] for row in rows})
    return summary


def main(argv=None, run=run, tasks=TASKS, seeds="0,1,2,3,4", combinations=COMBINATIONS,
         rule="rank by median test CRPS per twin; lowest mean rank; ties: single, "
              "ensemble, best", description=__doc__):
    """Score ``combinations`` of the restarts on ``tasks`` (``run(task, seed)`` returns
    :func:`score_restarts`' dict), print the lines and the choice by ``rule``."""
    from dev_protocol import print_choice, run_jobs, twin_args
    a, tasks, seeds = twin_args(description, tasks, seeds, argv)
    jobs = [(t, s) for t in tasks for s in seeds]
    start = time.time()
    results = run_jobs(run, jobs, a.jobs)
    for r in results:
        print(json.dumps(r), flush=True)
    print_choice(crps_summary(results, tasks, seeds, combinations), combinations, rule, start)


if __name__ == "__main__":
    main()
