r"""A guide for the ``pyro.sample`` sites a user adds to a model's ``model()``.

The library's models draw their own latent sites in ``model.guide`` (PI-DKL's collocation
points ``Z`` and posterior-draw noise ``eps`` from their priors; a coefficient declared with
a prior, ``Parameter(value, prior=...)``, by a normal guide of its own). A
site the user adds (a prior on an equation coefficient, say) needs a guide of its own:
``pk.fit(model, guide=...)`` takes an autoguide's name (``"normal"``, ``"mvn"``,
``"delta"``, ``"laplace"``), an :class:`~pyro.infer.autoguide.AutoGuide` class, or the user's
guide function, and :func:`make_guide` joins it to the model's own draws: the autoguide is
built on the model with the sites of ``model.guide`` hidden (``poutine.block``), and the
joined guide
runs ``model.guide()`` then it. A guide function that already draws the prior sites is used
as it is. The fit is then ``Trace_ELBO``'s (:func:`~pyro_pidkl.infer.svi.fit`).
"""

import pyro
from pyro import poutine
from pyro.infer import autoguide

__all__ = ["AUTOGUIDES", "make_guide"]

#: autoguides by name
AUTOGUIDES = {"normal": autoguide.AutoNormal, "mvn": autoguide.AutoMultivariateNormal,
              "delta": autoguide.AutoDelta, "laplace": autoguide.AutoLaplaceApproximation}


class JoinedGuide:
    """``model.guide()`` (the model's prior sites), then ``guide()`` (the user's sites)."""

    def __init__(self, model, guide):
        self.model, self.guide = model, guide

    def __call__(self, *args, **kwargs):
        self.model.guide(*args, **kwargs)
        return self.guide(*args, **kwargs)


def _sample_sites(fn):
    trace = poutine.trace(poutine.block(fn, hide_types=["param"])).get_trace()
    return {n for n, s in trace.nodes.items() if s["type"] == "sample" and not s["is_observed"]}


def make_guide(model, guide):
    """The guide a fit of ``model`` runs for ``guide`` (module docstring)."""
    with pyro.get_param_store().scope():          # the sites the model's own guide draws
        prior = tuple(sorted(_sample_sites(model.guide)))
    if isinstance(guide, str):
        if guide not in AUTOGUIDES:
            raise ValueError(f"Expected guide to be one of {sorted(AUTOGUIDES)}, an AutoGuide "
                             f"class or a guide function; got {guide!r}")
        guide = AUTOGUIDES[guide]
    if isinstance(guide, type) and issubclass(guide, autoguide.AutoGuide):
        auto = guide(poutine.block(model.model, hide=list(prior)))
        return JoinedGuide(model, auto) if prior else auto
    if not callable(guide):
        raise TypeError(f"Expected guide to be an autoguide name, an AutoGuide class or a "
                        f"callable; got {type(guide).__name__}")
    if prior and isinstance(guide, autoguide.AutoGuide):
        return JoinedGuide(model, guide)
    if prior and guide != model.guide:
        with pyro.get_param_store().scope():
            drawn = _sample_sites(guide)
        if not set(prior) & drawn:
            return JoinedGuide(model, guide)
    return guide
