r"""The ELBO of a model whose guide draws every latent site from its prior, in one pass.

PI-DKL's guide draws the collocation points :math:`Z` and the draw's noise
:math:`\epsilon` from their priors, and the GP's hyperparameters are point estimates, so
in ``Trace_ELBO``'s estimate

.. math::
    \widehat{\mathcal{L}} = \sum_{\text{factors}} \log \ell
        + \sum_{\text{latent } s} \big(\log p(s) - \log q(s)\big)

every latent term is :math:`\log p(s) - \log p(s) = 0` exactly, at every draw. The
estimate is the sum of the model's factor sites at latent values drawn from their priors.
:class:`PriorGuideELBO` computes just that by running ``model()`` once, instead of tracing
the guide, replaying the model against it and scoring both traces: the same value and the
same gradients (``tests/test_fit.py`` checks them against ``Trace_ELBO`` to 1e-10 from one
random state), with less Python per step.

A model opts in with a ``guide_is_prior`` attribute (``True`` when its guide samples
exactly its latent sites, each from its prior, and has no parameters). For any other
model, guide, or more than one particle, :class:`PriorGuideELBO` hands the call to
``Trace_ELBO``; a latent site that the model did not declare stops the step with an error.
"""

import torch
from pyro.distributions.util import scale_and_mask
from pyro.infer import Trace_ELBO
from pyro.poutine.messenger import Messenger

__all__ = ["PriorGuideELBO", "guide_is_prior"]


def guide_is_prior(model, guide):
    """Whether ``guide`` is ``model``'s own guide and the model declares that guide to draw
    every latent site from its prior (``model.guide_is_prior``)."""
    owner = getattr(model, "__self__", None)
    return (owner is not None and getattr(guide, "__self__", None) is owner
            and getattr(guide, "__func__", None) is getattr(type(owner), "guide", None)
            and bool(getattr(owner, "guide_is_prior", False)))


class _FactorSum(Messenger):
    """Adds up the log-densities of the observed (factor) sites; latent sites draw from
    their priors as Pyro's default does, and must be among ``latent``."""

    def __init__(self, latent):
        super().__init__()
        self.latent, self.total = frozenset(latent), 0.0

    def _pyro_post_sample(self, msg):
        if not msg["is_observed"]:
            if msg["name"] not in self.latent:
                raise ValueError(
                    f"PriorGuideELBO: the latent site {msg['name']!r} is not one the model "
                    f"declares its guide to draw from the prior ({sorted(self.latent)}; "
                    "give the fit a guide for it: pk.fit(model, guide='normal'))")
            return
        log_p = msg["fn"].log_prob(msg["value"], *msg["args"], **msg["kwargs"])
        self.total = self.total + scale_and_mask(log_p, msg["scale"], msg["mask"]).sum()


class PriorGuideELBO(Trace_ELBO):
    r"""``Trace_ELBO`` for a guide that is the prior: the negative sum of the model's
    factor sites, the latent sites drawn from their priors (module docstring). One particle;
    anything else goes to ``Trace_ELBO``."""

    def _direct(self, model, guide):
        return self.num_particles == 1 and guide_is_prior(model, guide)

    def _loss(self, model, guide, args, kwargs):
        owner = model.__self__
        with _FactorSum(getattr(owner, "prior_sites", ())) as acc:
            model(*args, **kwargs)
        return -acc.total

    def loss(self, model, guide, *args, **kwargs):
        if not self._direct(model, guide):
            return super().loss(model, guide, *args, **kwargs)
        with torch.no_grad():
            return float(self._loss(model, guide, args, kwargs))

    def differentiable_loss(self, model, guide, *args, **kwargs):
        if not self._direct(model, guide):
            return super().differentiable_loss(model, guide, *args, **kwargs)
        return self._loss(model, guide, args, kwargs)

    def loss_and_grads(self, model, guide, *args, **kwargs):
        if not self._direct(model, guide):
            return super().loss_and_grads(model, guide, *args, **kwargs)
        loss = self._loss(model, guide, args, kwargs)
        if not isinstance(loss, torch.Tensor):   # a model without factor sites
            return float(loss)
        if loss.requires_grad:
            loss.backward()
        return float(loss.detach())
