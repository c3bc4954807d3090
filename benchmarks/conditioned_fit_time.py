"""Wall time of a 1000-step fit of the physics-conditioned GP at N training points and M
collocation points (the heat problem, coefficients learned), in this process, with the
threads given; one JSON line per size appended to docs/results/conditioned_fit_time.jsonl.

    python benchmarks/conditioned_fit_time.py --N 100,1000 --M 200 --threads 2
"""

import argparse
import json
import os
import platform
import time

import torch

import pyro_pidkl as pk

OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results",
                   "conditioned_fit_time.jsonl")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--N", default="100,1000")
    p.add_argument("--M", default="200")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=OUT)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    problem = pk.datasets.problem("heat")
    for N in (int(n) for n in args.N.split(",")):
        for M in (int(m) for m in args.M.split(",")):
            problem.n_train = N
            data = problem.sample("extrapolation", seed=0)
            model = pk.PhysicsConditionedGP(data.X_train, data.y_train, problem.equation(),
                                            problem.input_names, collocation=M,
                                            domain=pk.Box(**problem.domain))
            t0 = time.perf_counter()
            pk.fit(model, num_steps=args.steps, lr=0.01, seed=0, progress=False)
            seconds = time.perf_counter() - t0
            mean, _ = model(data.X_test)
            rec = {"N": N, "M": M, "steps": args.steps, "threads": args.threads,
                   "fit_s": round(seconds, 2), "step_ms": round(1000 * seconds / args.steps, 2),
                   "rmse": float(pk.rmse(mean, torch.as_tensor(data.f_test))),
                   "alpha": model.equation_parameters()["alpha"],
                   "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch "
                              f"{torch.__version__}"}
            print(json.dumps(rec), flush=True)
            with open(args.out, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
