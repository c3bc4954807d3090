"""What the source kernel learns in the protocol's PI-DKL fits (a diagnostic, no choice).

For each seed, the ``pidkl`` fit of ``pidkl reproduce TASK`` (the experiment's fixed
configuration, same seeding), then one JSON line: test RMSE and 95% coverage, the learned
source-kernel variance and lengthscales, the deep kernel's variance, the noise variance
(user units) and the equation parameters.

    python benchmarks/source_amplitude.py ode [--seeds 0-4]
"""

import argparse
import json


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("task")
    p.add_argument("--seeds", default="0-4")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args(argv)

    import pyro
    import torch

    from pyro_pidkl import fit
    from pyro_pidkl.cli import _parse_seeds
    from pyro_pidkl.diagnostics import predictive_scores
    from pyro_pidkl.experiments import EXPERIMENTS, build_model

    torch.set_num_threads(a.threads)
    e = EXPERIMENTS[a.task]
    config = dict(e.protocol.fixed)
    for seed in _parse_seeds(a.seeds):
        data = e.data(seed)
        pyro.set_rng_seed(seed)
        model = build_model("pidkl", e, data.X_train, data.y_train, data.input_names, **config)
        fit(model, num_steps=e.protocol.num_steps, lr=e.protocol.lr, progress=False)
        mean, var = model(data.X_test, noiseless=False)
        s = predictive_scores(mean, var, data.y_test)
        sk = model.source_kernel
        print(json.dumps({"task": a.task, "seed": seed, "config": config,
                          "rmse": s["rmse"], "coverage95": s["coverage"][0.95],
                          "source_variance": sk.variance.item(),
                          "source_lengthscale": sk.lengthscale.detach().tolist(),
                          "kernel_variance": model.kernel.kern.variance.item(),
                          "noise_variance": model.noise_variance(),
                          "learned": model.equation_parameters()}), flush=True)


if __name__ == "__main__":
    main()
