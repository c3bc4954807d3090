r"""Data-parallel training of the sparse variational model on :mod:`torch.distributed`.

Each process (rank) holds the whole model and draws its own minibatch, ``u``, ``Z`` and
``eps`` (seeded ``seed + rank``); its loss is an unbiased estimate of the negative ELBO, and
:class:`torch.nn.parallel.DistributedDataParallel` averages the gradients across ranks
(gloo on CPUs, nccl on GPUs), so a step with ``R`` ranks uses ``R`` minibatches. Start it
with ``torchrun``::

    torchrun --standalone --nproc_per_node 2 -m pyro_pidkl.distributed --N 100000 \
        --steps 500 --out ddp.json

Without ``torchrun`` the same command trains in one process (``world_size`` 1).
"""

import argparse
import json
import math
import os
import time

import pyro
import torch
from torch import nn

from .infer import default_elbo

__all__ = ["ELBOLoss", "fit_distributed"]


class ELBOLoss(nn.Module):
    """``forward() -> -ELBO`` of ``model.model`` / ``model.guide`` (differentiable), as a
    module whose parameters are the model's, so that DDP can wrap it."""

    def __init__(self, model, elbo=None):
        super().__init__()
        self.model = model
        self.elbo = elbo or default_elbo(model)

    def forward(self):
        return self.elbo.differentiable_loss(self.model.model, self.model.guide)


def _init(backend=None):
    import torch.distributed as dist

    if dist.is_available() and "WORLD_SIZE" in os.environ and not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if torch.cuda.is_available() else "gloo"))
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def fit_distributed(model, num_steps=1000, lr=0.01, seed=0, backend=None, callback=None):
    """Adam on the ELBO with gradients averaged over the ranks by DDP.

    :param model: a model with ``model()``/``guide()`` (e.g. :class:`~pyro_pidkl.models.
        SparsePIDKL`), built identically on every rank.
    :param int seed: ranks use ``seed + rank`` for their draws.
    :param str backend: ``"gloo"`` or ``"nccl"`` (default: nccl with CUDA, else gloo).
    :returns: ``(losses, seconds, world_size)``; ``losses`` are this rank's.
    """
    from torch.nn.parallel import DistributedDataParallel

    rank, world = _init(backend)
    pyro.clear_param_store()
    loss_module = ELBOLoss(model)
    pyro.set_rng_seed(seed)
    loss_module()                      # materialise lazily created parameters (autoguides)
    trainable = [p for p in loss_module.parameters() if p.requires_grad]
    if world > 1:
        device_ids = [model.X.device.index] if model.X.device.type == "cuda" else None
        loss_module = DistributedDataParallel(loss_module, device_ids=device_ids,
                                              find_unused_parameters=True)
    pyro.set_rng_seed(seed + rank)
    optimizer = torch.optim.Adam(trainable, lr=lr)
    losses = []
    start = time.perf_counter()
    for step in range(int(num_steps)):
        optimizer.zero_grad()
        loss = loss_module()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        if callback is not None:
            callback(step, losses[-1])
    pyro.clear_param_store()
    return losses, time.perf_counter() - start, world


def main(argv=None):
    """Train sparse PI-DKL on ``heat_2d(N)`` (data-parallel under torchrun); rank 0 prints
    and writes a JSON record with the test RMSE and learned diffusivity."""
    from .datasets import heat_2d
    from .diagnostics import predictive_scores
    from .domain import Box
    from .models import SparsePIDKL
    from . import physics

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
    data = heat_2d(n_train=args.N, n_test=2000, seed=args.seed)
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
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
