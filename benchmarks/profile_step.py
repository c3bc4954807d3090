"""Where a PI-DKL training step spends its time, next to a DKL step (torch.profiler).

The ``benchmarks/step_time.py`` case (1-D heat equation, d = 2) at one ``N`` and ``m``: each model takes
3 warm-up steps, then 3 profiled steps; per model it prints the op calls per step in all and
the ops with the most self CPU time, with calls and milliseconds per step. With ``--shapes``
it then lists the ops on large arrays (an operand of >= N m elements) whose calls per step
differ between the two models, by input shapes: where the physics term's extra arithmetic is.

    python benchmarks/profile_step.py [--N 1000] [--m 100] [--threads 2] [--rows 8] [--shapes]
"""

import argparse

#: ops that only make views or metadata (left out of ``--shapes``)
VIEWS = {"as_strided", "detach", "numpy_T", "permute", "resolve_conj", "t", "to",
         "transpose", "view", "expand", "reshape", "unsqueeze", "squeeze", "select", "slice",
         "alias"}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--N", type=int, default=1000)
    p.add_argument("--m", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--shapes", action="store_true")
    args = p.parse_args(argv)

    import numpy as np
    import pyro
    import torch
    from torch.profiler import profile

    from pyro_pidkl import PIDKL, physics
    from pyro_pidkl.models import DKL
    from pyro_pidkl.infer.svi import _TorchAdam, default_elbo, svi_step

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.uniform(0.0, 1.0, (args.N, 2))
    y = np.exp(-np.pi ** 2 * 0.1 * X[:, 1]) * np.sin(np.pi * X[:, 0])
    y = y + 0.01 * rng.standard_normal(args.N)
    steps = 3
    large = {}
    for name in ("pidkl", "dkl"):
        pyro.set_rng_seed(0)
        pyro.clear_param_store()
        model = (PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=("x", "t"), m=args.m)
                 if name == "pidkl" else DKL(X, y, input_names=("x", "t")))
        elbo, optim = default_elbo(model), _TorchAdam(1e-3)
        for _ in range(steps):
            svi_step(model, elbo, optim)
        with profile(record_shapes=args.shapes) as prof:
            for _ in range(steps):
                svi_step(model, elbo, optim)
        ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        total = sum(e.self_cpu_time_total for e in ops) / 1e3 / steps
        calls = sum(e.count for e in ops) // steps
        print(f"{name} (N = {args.N}, m = {args.m}): {total:.1f} ms self CPU per step, "
              f"{calls} op calls per step")
        for e in ops[:args.rows]:
            print(f"  {e.key:<36} {e.count // steps:>4} calls/step "
                  f"{e.self_cpu_time_total / 1e3 / steps:8.1f} ms/step")
        if args.shapes:
            large[name] = {(e.key, str(e.input_shapes)): e.count // steps
                           for e in prof.key_averages(group_by_input_shape=True)
                           if e.key.startswith("aten::") and e.key[6:] not in VIEWS and any(
                               len(sh) == 2 and sh[0] * sh[1] >= args.N * args.m
                               for sh in e.input_shapes if isinstance(sh, list))}
    if args.shapes:
        print("aten ops on large arrays whose calls per step differ (pidkl, dkl, op, shapes):")
        for key in sorted(set(large["pidkl"]) | set(large["dkl"])):
            a, b = large["pidkl"].get(key, 0), large["dkl"].get(key, 0)
            if a != b:
                print(f"  {a:>3} {b:>3}  {key[0]:<24} {key[1]}")


if __name__ == "__main__":
    main()
