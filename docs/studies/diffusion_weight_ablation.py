"""Why more collocation points change 1dDiffusion: more points, or more weight?

An ablation on the five 1dDiffusion twins of ``docs/studies/dev_diffusion_family.py`` (not a
choice: the protocol stays ``DIFFUSION_FAMILY_CHOICE``). The physics term is a sum over the
``m`` collocation points, so going from m = 10 to m = 30 at gamma = 1 both averages over more
points and triples the term's weight beside the 48 data points. Holding ``gamma * m = 10``
fixed separates the two:

    g1-m10      gamma = 1,   m = 10     (the first twin choice)
    g1-m30      gamma = 1,   m = 30     (the family's choice)
    g0.33-m30   gamma = 1/3, m = 30     (the weight of m = 10, the points of m = 30)
    g0.1-m100   gamma = 0.1, m = 100    (the weight of m = 10, the points of m = 100)

all with the ``[phi(u), u]`` kernel, one fit (restart 0) per seed 0-2. Each line has the
test RMSE, CRPS and 95% coverage, the learned noise standard deviation (user units) and
diffusivity.

    python docs/studies/diffusion_weight_ablation.py > docs/results/diffusion_weight_ablation.jsonl
"""

import json
import math

import numpy as np

from dev_diffusion_family import family_twins, register
from dev_protocol import run_jobs, twin_args

CONFIGS = {"g1-m10": (1.0, 10), "g1-m30": (1.0, 30), "g0.33-m30": (1 / 3, 30),
           "g0.1-m100": (0.1, 100)}


def run(task, config, seed):
    import torch

    from pyro_pidkl.paper.reproduce import run_one
    torch.set_num_threads(1)
    gamma, m = CONFIGS[config]
    r = run_one(register(task, m, gamma), "pidkl", seed)
    return {"task": task, "config": config, "seed": seed, "gamma": gamma, "m": m,
            "rmse": r["rmse"], "crps": r["crps"], "coverage95": r["coverage95"],
            "noise_sd": math.sqrt(r["hyper"]["noise_variance"]),
            "alpha": r["hyper"]["learned"]["alpha"]}


def main():
    a, tasks, seeds = twin_args(__doc__, ["diffusion-dev", *family_twins()], "0,1,2")
    jobs = [(t, c, s) for c in reversed(CONFIGS) for t in tasks for s in seeds]
    results = run_jobs(run, jobs, a.jobs)
    for r in results:
        print(json.dumps(r), flush=True)
    for t in tasks:
        for c in CONFIGS:
            rs = [r for r in results if r["task"] == t and r["config"] == c]
            print(json.dumps({"task": t, "config": c, "seeds": seeds, **{
                f"median_{k}": float(np.median([r[k] for r in rs]))
                for k in ("rmse", "crps", "coverage95", "noise_sd", "alpha")}}), flush=True)


if __name__ == "__main__":
    main()
