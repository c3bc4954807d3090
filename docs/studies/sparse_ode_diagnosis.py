"""Why sparse variational PI-DKL fails on the 1stODE extrapolation: one JSON line per case.

Seed 0 of the ``ode`` experiment, gamma = 1, m = 10, the experiments' sparse options
(``VARIANT_SVGP``), 1000 Adam steps at lr 0.01 unless the case says otherwise. Each line has
the test RMSE and 95% coverage, the learned noise and deep-kernel variance (standardised
units) and the learned equation parameters. Test data are only scored, never used to choose.

    python docs/studies/sparse_ode_diagnosis.py [--jobs 2]
"""

import argparse
import json
import multiprocessing

CASES = [
    {"model": "exact"},
    {"model": "sparse", "inducing_init": "data"},
    {"model": "sparse", "inducing_init": "domain"},
    {"model": "sparse", "inducing_init": "data", "fixed_truth": True},
    {"model": "sparse", "inducing_init": "domain", "fixed_truth": True},
    {"model": "sparse", "inducing_init": "data", "kernel_variance": 100.0},
    {"model": "sparse", "inducing_init": "domain", "kernel_variance": 100.0},
    {"model": "sparse", "inducing_init": "data", "steps": 4000},
]


def run_case(case, seed=0):
    import pyro
    import torch

    import pyro_pidkl as pk
    from pyro_pidkl.diagnostics import predictive_scores
    from pyro_pidkl.paper.experiments import EXPERIMENTS, VARIANT_SVGP
    from pyro_pidkl.models import SparsePIDKL

    torch.set_num_threads(1)
    exp = EXPERIMENTS["ode"]
    data = exp.data(seed)
    if case.get("fixed_truth"):
        equation = pk.physics.first_order_ode(
            **{k: pk.Parameter(v, fixed=True) for k, v in data.truth.items()})
    else:
        equation = exp.equation()
    kwargs = dict(input_names=data.input_names, gamma=1.0, m=10, domain=pk.Box(exp.domain),
                  **exp.model_kwargs, **exp.pidkl_kwargs)
    pyro.set_rng_seed(seed)
    if case["model"] == "exact":
        model = pk.PIDKL(data.X_train, data.y_train, equation, **kwargs)
    else:
        model = SparsePIDKL(data.X_train, data.y_train, equation, **kwargs, **VARIANT_SVGP,
                            inducing_init=case["inducing_init"])
    if "kernel_variance" in case:
        model.kernel.kern.variance = torch.tensor(case["kernel_variance"], dtype=model.X.dtype)
    pk.fit(model, num_steps=case.get("steps", 1000), progress=False, seed=seed)
    mean, var = model(data.X_test, noiseless=False)
    scores = predictive_scores(mean, var, data.y_test)
    return {**case, "seed": seed, "rmse": scores["rmse"],
            "coverage95": scores["coverage"][0.95], "noise": float(model.noise.detach()),
            "kernel_variance_learned": float(model.kernel.kern.variance.detach()),
            "learned": model.equation_parameters()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args(argv)
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for row in pool.imap(run_case, CASES):
            print(json.dumps({k: (round(v, 5) if isinstance(v, float) else v)
                              for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
