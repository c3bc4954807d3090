r"""Data-parallel training of the sparse variational model on :mod:`torch.distributed`.

Each process (rank) holds the whole model and draws its own minibatch, ``u``, ``Z`` and
``eps`` (seeded ``seed + rank``); its loss is an unbiased estimate of the negative ELBO, and
:class:`torch.nn.parallel.DistributedDataParallel` averages the gradients across ranks
(gloo on CPUs, nccl on GPUs), so a step with ``R`` ranks uses ``R`` minibatches. Start it
with ``torchrun``; ``benchmarks/distributed_heat.py`` is a complete example::

    torchrun --standalone --nproc_per_node 2 benchmarks/distributed_heat.py --N 100000 \
        --steps 500 --out ddp.json

Without ``torchrun`` the same script trains in one process (``world_size`` 1).
"""

import os
import time

import pyro
import torch
from torch import nn

from .svi import default_elbo

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
