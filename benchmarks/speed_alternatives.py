"""Two ways to a faster step that the library measured and did not take; one JSON line each.

``compile``: ``torch.compile`` (inductor) of the feature map's Taylor-mode jet under
autograd (the paper's MLP, 100 points, first derivatives in two directions and one second
derivative), against the same jet eagerly and the library's one-node jet (``taylor_chain``):
the seconds to compile (the first call; inductor's cache in ``--cache-dir``, by default a new
empty folder, i.e. the cost of a first run on a machine) and the median milliseconds of a
forward and backward after, the three interleaved.

``fused-adam``: a 20-step PI-DKL fit (the ``tests/test_fit.py`` case) with torch's fused Adam
against ``pyro.optim.Adam``: the largest relative difference of the losses, the largest
difference of each parameter tensor that differs by more than 1e-10, and the median
milliseconds of a ``foreach`` and a fused Adam step over the same parameters, interleaved.

    python benchmarks/speed_alternatives.py compile|fused-adam [--threads 2] [--cache-dir D]
"""

import argparse
import copy
import json
import os
import tempfile
import time

from step_time import interleaved_medians


def compile_jet():
    import torch

    from pyro_pidkl.kernels import MLP
    from pyro_pidkl.kernels.feature_jets import _taylor
    from pyro_pidkl.kernels.taylor_chain import chain_layers, taylor_chain

    torch.manual_seed(0)
    layers = chain_layers(MLP(2, 20, dtype=torch.float64))
    U = torch.randn(100, 2, dtype=torch.float64)
    eye = torch.eye(2, dtype=torch.float64)
    T0 = torch.cat([eye[:, None, :].expand(2, 100, 2), torch.zeros(1, 100, 2,
                                                                    dtype=torch.float64)])
    wz, wT = torch.randn(100, 20, dtype=torch.float64), torch.randn(3, 100, 20,
                                                                   dtype=torch.float64)

    def loss(jet):
        z, T = jet(layers, U, T0, 2, [0], [0])
        return (z * wz).sum() + (T * wT).sum()

    compiled_loss = torch.compile(lambda: loss(_taylor))
    start = time.perf_counter()
    compiled_loss().backward()
    compile_s = time.perf_counter() - start
    ms = interleaved_medians({"eager": lambda: loss(_taylor).backward(),
                              "compiled": lambda: compiled_loss().backward(),
                              "taylor_chain": lambda: loss(taylor_chain).backward()},
                             repeats=1000, warmup=20)
    return {"case": "compile", "compile_s": compile_s,
            **{f"{k}_ms": v * 1e3 for k, v in ms.items()}, "threads": torch.get_num_threads()}


def fused_adam():
    import numpy as np
    import pyro
    import torch

    from pyro_pidkl import PIDKL, fit, physics

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (30, 2))
    y = np.sin(3 * X[:, 0]) * np.exp(-X[:, 1])
    model = PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=("x", "t"), m=8, seed=0)
    twin = copy.deepcopy(model)

    class FusedAdam:
        def __init__(self):
            self.optim = None

        def __call__(self, params):
            if self.optim is None:
                self.optim = torch.optim.Adam(list(params), lr=0.02, fused=True)
            self.optim.step()
    fused = fit(model, num_steps=20, lr=0.02, seed=3, progress=False, optimizer=FusedAdam())
    plain = fit(twin, num_steps=20, lr=0.02, seed=3, progress=False,
                optimizer=pyro.optim.Adam({"lr": 0.02}))
    loss_rel = max(abs(a - b) / abs(b) for a, b in zip(fused.losses, plain.losses))
    with torch.no_grad():
        params_apart = {name: float((a - b).abs().max()) for (name, a), (_, b) in
                        zip(model.named_parameters(), twin.named_parameters())
                        if float((a - b).abs().max()) > 1e-10}
    steps = {}
    for name, kwargs in (("foreach", {"foreach": True}), ("fused", {"fused": True})):
        params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
        for p in params:
            p.grad = torch.randn_like(p)
        steps[name] = torch.optim.Adam(params, lr=1e-3, **kwargs).step
    ms = interleaved_medians(steps, repeats=2000, warmup=20)
    return {"case": "fused-adam", "max_loss_rel_diff": loss_rel, "params_apart": params_apart,
            "adam_step_ms_foreach": ms["foreach"] * 1e3,
            "adam_step_ms_fused": ms["fused"] * 1e3, "threads": torch.get_num_threads()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=("compile", "fused-adam"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache-dir", default=None,
                   help="inductor's cache (default: a new empty folder)")
    args = p.parse_args(argv)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp()
    import torch
    torch.set_num_threads(args.threads)
    os.environ["PIDKL_THREADS"] = str(args.threads)   # pk.fit's own default is one thread
    row = compile_jet() if args.case == "compile" else fused_adam()
    if args.case == "compile":
        row["cache_dir"] = args.cache_dir or "new empty folder"
    print(json.dumps({k: float(f"{v:.4g}") if isinstance(v, float) else v
                      for k, v in row.items()}))


if __name__ == "__main__":
    main()
