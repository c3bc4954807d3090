"""What the source kernel learns in the protocol's PI-DKL fits, and what pinning its
amplitude does (diagnostics, no choice).

For each seed, the ``pidkl`` fit of ``pidkl reproduce TASK`` (the experiment's fixed
configuration, same seeding), then one JSON line: test RMSE, CRPS and 95% coverage, the
source-kernel variance and lengthscales, the deep kernel's variance, the noise variance
(user units) and the equation parameters.

With ``--pin V1,V2,...`` the source variance :math:`s_g^2` (units of the residual squared)
is held at each value instead of learned, one fit per value and seed (``learned`` in the
list keeps the default). Since :math:`\\log N(h | 0, s_g^2 R) = -h^T R^{-1} h / (2 s_g^2) -
m \\log s_g + c`, a pinned amplitude sets how strongly the physics term binds the draw. TASK
may also be a drawn 1dDiffusion twin (``diffusion-fam0`` ... of
``docs/studies/dev_diffusion_family.py``, at the 1dDiffusion protocol's configuration).

    python docs/studies/source_amplitude.py ode [--seeds 0-4]
    python docs/studies/source_amplitude.py diffusion-dev,diffusion-fam0 --seeds 0-2 \\
        --pin learned,10,0.1 --jobs 2
"""

import argparse
import os
import json


def experiment(task):
    """The experiment of ``task``; drawn diffusion twins are registered first."""
    from pyro_pidkl.paper.experiments import DIFFUSION_FAMILY_CHOICE, EXPERIMENTS
    if task.startswith("diffusion-fam"):
        from dev_diffusion_family import register
        task = register(task, DIFFUSION_FAMILY_CHOICE["m"], DIFFUSION_FAMILY_CHOICE["gamma"])
    return EXPERIMENTS[task]


def pin_source_variance(model, value):
    """Hold ``model``'s source-kernel variance at ``value`` (a constant, not a parameter)."""
    import torch
    sk = model.physics.source_kernel
    del sk.variance                       # the PyroParam
    sk.variance = torch.tensor(float(value), dtype=model.X.dtype, device=model.X.device)


def run(task, seed, pin, threads=1):
    import pyro
    import torch

    from pyro_pidkl import fit
    from pyro_pidkl.diagnostics import predictive_scores
    from pyro_pidkl.paper.experiments import build_model

    torch.set_num_threads(threads)
    os.environ["PIDKL_THREADS"] = str(threads)   # pk.fit's own default is one thread
    e = experiment(task)
    config = dict(e.protocol.fixed)
    data = e.data(seed)
    pyro.set_rng_seed(seed)
    model = build_model("pidkl", e, data.X_train, data.y_train, data.input_names, **config)
    if pin != "learned":
        pin_source_variance(model, pin)
    fit(model, num_steps=e.protocol.num_steps, lr=e.protocol.lr, progress=False)
    mean, var = model(data.X_test, noiseless=False)
    s = predictive_scores(mean, var, data.y_test)
    sk = model.physics.source_kernel
    return {"task": task, "seed": seed, "config": config, "source_variance_pinned": pin,
            "rmse": s["rmse"], "crps": s["crps"], "coverage95": s["coverage"][0.95],
            "source_variance": float(sk.variance.detach()),
            "source_lengthscale": sk.lengthscale.detach().tolist(),
            "kernel_variance": model.kernel.kern.variance.item(),
            "noise_variance": model.noise_variance(),
            "learned": model.equation_parameters()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tasks", help="comma-separated task names")
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--pin", default=None, help="comma-separated source variances, or "
                   "'learned'; default: learned only (the first diagnostic)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1)
    a = p.parse_args(argv)

    from dev_protocol import run_jobs
    from pyro_pidkl.paper.cli import _parse_seeds

    pins = a.pin.split(",") if a.pin else ["learned"]
    pins = [v if v == "learned" else float(v) for v in pins]
    jobs = [(t, s, v, a.threads) for t in a.tasks.split(",") for v in pins
            for s in _parse_seeds(a.seeds)]
    for r in run_jobs(run, jobs, a.jobs):
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
