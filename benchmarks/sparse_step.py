"""Time one SparsePIDKL training step three ways in one process, steps interleaved: without
the physics term (gamma = 0), with its derivatives in closed form (the default) and with
``derivatives="autograd"`` (autograd through the conditional, the way before). The task
and settings are those of ``benchmarks/scale.py`` (2-D heat equation, M = 128, B = 1000,
m = 10); one JSON line with the median seconds per step of each.

    python benchmarks/sparse_step.py [--N 10000] [--device cpu|cuda] [--repeats 20]
"""

import argparse
import functools
import json
import math


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", type=int, default=10000)
    p.add_argument("--M", type=int, default=128)
    p.add_argument("--B", type=int, default=1000)
    p.add_argument("--m", type=int, default=10)
    p.add_argument("--device", default="cpu")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args(argv)

    import pyro
    import torch

    from pyro_pidkl import Box, physics
    from step_time import interleaved_medians
    from pyro_pidkl.datasets import simulate_heat_2d
    from pyro_pidkl.infer.svi import default_elbo, svi_step
    from pyro_pidkl.models import SparsePIDKL

    if a.threads:
        torch.set_num_threads(a.threads)
    data = simulate_heat_2d(n_train=a.N, n_test=10, seed=0)
    cuda = torch.device(a.device).type == "cuda"
    steps = {}
    for name, kw in (("no_physics", dict(gamma=0.0)), ("closed_form", dict(gamma=1.0)),
                     ("autograd", dict(gamma=1.0, derivatives="autograd"))):
        pyro.set_rng_seed(0)
        model = SparsePIDKL(data.X_train, data.y_train, physics.diffusion_2d(alpha=1.0),
                            input_names=("x", "y", "t"), num_inducing=a.M, batch_size=a.B,
                            m=a.m, domain=Box(x=(0, 2 * math.pi), y=(0, 2 * math.pi),
                                              t=(0, 1)), **kw).to(a.device)
        steps[name] = functools.partial(svi_step, model, default_elbo(model),
                                        pyro.optim.Adam({"lr": 0.01}))
    medians = interleaved_medians(steps, a.repeats, a.device, warmup=3)
    out = {"N": a.N, "M": a.M, "B": a.B, "m": a.m, "device": a.device,
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    if cuda:
        out["gpu"] = torch.cuda.get_device_name(torch.device(a.device))
    out.update({f"{name}_step_s": round(t, 5) for name, t in medians.items()})
    out["physics_closed_form_s"] = round(out["closed_form_step_s"] - out["no_physics_step_s"], 5)
    out["physics_autograd_s"] = round(out["autograd_step_s"] - out["no_physics_step_s"], 5)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
