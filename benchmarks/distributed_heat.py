"""Sparse PI-DKL on the 2-D heat task, data-parallel under ``torchrun``
(:func:`pyro_pidkl.infer.distributed.fit_distributed`); rank 0 prints and writes a JSON record
with the test RMSE and the learned diffusivity.

    torchrun --standalone --nproc_per_node 2 benchmarks/distributed_heat.py --N 100000 \
        --steps 500 --out ddp.json
    python benchmarks/distributed_heat.py --N 5000          # one process
"""

import argparse
import json
import math
import os

import pyro
import torch

from pyro_pidkl import SparsePIDKL, physics
from pyro_pidkl.datasets import simulate_heat_2d
from pyro_pidkl.diagnostics import predictive_scores
from pyro_pidkl.infer.distributed import fit_distributed
from pyro_pidkl.physics.domain import Box


def main(argv=None):
    """Train sparse PI-DKL on ``simulate_heat_2d(N)`` (data-parallel under torchrun); rank 0 prints
    and writes a JSON record with the test RMSE and learned diffusivity."""
    p = argparse.ArgumentParser(description="sparse PI-DKL on the 2-D heat task, DDP")
    p.add_argument("--N", type=int, default=5000)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--M", type=int, default=64)
    p.add_argument("--B", type=int, default=256)
    p.add_argument("--m", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    data = simulate_heat_2d(n_train=args.N, n_test=2000, seed=args.seed)
    pyro.set_rng_seed(args.seed)
    model = SparsePIDKL(data.X_train, data.y_train, physics.diffusion_2d(alpha=1.0),
                        input_names=("x", "y", "t"), gamma=1.0, m=args.m, num_inducing=args.M,
                        batch_size=args.B,
                        domain=Box(x=(0, 2 * math.pi), y=(0, 2 * math.pi), t=(0, 1)))
    device = args.device
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    model = model.to(device)
    losses, seconds, world = fit_distributed(model, args.steps, args.lr, args.seed)
    rank = int(os.environ.get("RANK", 0))
    if args.out:  # every rank: a checksum of its parameters (DDP keeps them identical)
        with torch.no_grad():
            checksum = sum(float(p.double().sum()) for p in model.parameters())
        with open(f"{args.out}.rank{rank}", "w") as fh:
            json.dump({"rank": rank, "parameter_checksum": checksum}, fh)
    if rank == 0:
        mean, var = model(data.X_test, noiseless=False)
        scores = predictive_scores(mean.cpu(), var.cpu(), data.y_test)
        record = {"world_size": world, "N": args.N, "steps": args.steps, "M": args.M,
                  "B": args.B, "seconds": seconds, "rmse": scores["rmse"],
                  "coverage95": scores["coverage"][0.95],
                  "alpha": model.equation_parameters()["alpha"],
                  "final_loss_mean_last50": sum(losses[-50:]) / len(losses[-50:])}
        print(json.dumps(record))
        if args.out:
            with open(args.out, "w") as fh:
                json.dump(record, fh)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        # every rank leaves together: a rank that tore its process group down while rank 0
        # was still predicting sometimes aborted ("terminate called without an active
        # exception")
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
