"""Model code a Pyro user edits: a pyro.param added to model() is learned and kept, and a
pyro.sample site added to it gets a guide through pk.fit(model, guide=...)."""

import functools

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.nn import pyro_method

import pyro_pidkl as pk
from pyro_pidkl import physics
from pyro_pidkl.infer.user_params import user_params

D = torch.float64


def _residual(model):
    physics_term = model.physics
    posterior = model.posterior()
    pyro.factor("data", posterior.log_marginal())
    Z = physics_term.sample_Z()
    eps = physics_term.sample_eps()
    h = physics_term.residual(functools.partial(model.posterior_draw, posterior), Z, eps)
    return physics_term, posterior, Z, h


class LearnedLogWeight(pk.PIDKL):
    """The README's model with one line added: a learned weight of the physics factor."""

    @pyro_method
    def model(self):
        physics_term, posterior, Z, h = _residual(self)
        log_gamma = pyro.param("log_gamma", torch.tensor(0.0, dtype=D))
        pyro.factor("physics", log_gamma.exp() * physics_term.log_prob(h, Z))
        return posterior


class LatentWeight(pk.PIDKL):
    """The physics weight a latent variable with a prior."""

    @pyro_method
    def model(self):
        physics_term, posterior, Z, h = _residual(self)
        gamma = pyro.sample("gamma", dist.LogNormal(torch.tensor(0.0, dtype=D), 1.0))
        pyro.factor("physics", gamma * physics_term.log_prob(h, Z))
        return posterior


def _build(cls, seed=0):
    data = pk.datasets.simulate_first_order_ode()
    pyro.set_rng_seed(seed)
    return cls(data.X_train, data.y_train, physics.first_order_ode(B=0.5, D=0.5), gamma=1.0,
               m=10, domain=pk.Box(t=(0.0, 1.0)))


def test_a_users_pyro_param_is_learned_kept_and_isolated():
    """Learned (it moves from its initial value), readable by pyro.param after the fit and
    kept on the model, and seen by the model's own scoped methods; a second model's fit
    does not change the first one's value."""
    model = _build(LearnedLogWeight)
    pk.fit(model, num_steps=150, lr=0.02, progress=False)
    learned = float(pyro.param("log_gamma"))
    assert abs(learned) > 1e-3
    assert float(user_params(model)["log_gamma"]) == pytest.approx(learned)
    # the training objective (its own scope of the store) runs the model with the value
    value = pk.infer.training_objective(model, num_particles=4)
    with torch.no_grad():
        model._user_params["log_gamma"][0].fill_(5.0)
    assert pk.infer.training_objective(model, num_particles=4) != pytest.approx(value)
    with torch.no_grad():
        model._user_params["log_gamma"][0].fill_(learned)
    other = _build(LearnedLogWeight, seed=1)
    pk.fit(other, num_steps=20, lr=0.02, progress=False)
    assert float(user_params(model)["log_gamma"]) == pytest.approx(learned)
    assert float(user_params(other)["log_gamma"]) != pytest.approx(learned)


def test_a_users_sample_site_gets_a_guide_through_fit():
    """Without a guide the fit says in one line how to give one; with guide='normal' (an
    AutoNormal on the user's site, joined to the model's own draws of Z and eps) the fit
    learns its posterior, kept as result.guide."""
    model = _build(LatentWeight)
    with pytest.raises(ValueError, match="guide='normal'"):
        pk.fit(model, num_steps=2, progress=False)
    result = pk.fit(model, num_steps=200, lr=0.02, progress=False, guide="normal")
    median = result.guide.guide.median()["gamma"]
    assert float(median) != pytest.approx(1.0, abs=1e-3)     # it moved off the prior's median
    assert "AutoNormal.locs.gamma" in user_params(model)
    with pytest.raises(ValueError, match="Expected guide to be one of"):
        pk.fit(model, num_steps=2, progress=False, guide="nuts")


class ConditionedWithExtra(pk.PhysicsConditionedGP):
    """The conditioned GP's model() with a user's parameter pulled to 2 by its own factor."""

    @pyro_method
    def model(self):
        joint = super().model()
        a = pyro.param("a", torch.tensor(0.0, dtype=D))
        pyro.factor("extra", -(a - 2.0) ** 2)
        return joint


class ConditionedWithSite(pk.PhysicsConditionedGP):
    @pyro_method
    def model(self):
        joint = super().model()
        pyro.sample("s", dist.Normal(torch.tensor(0.0, dtype=D), 1.0))
        return joint


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_the_conditioned_gps_model_takes_the_same_edits():
    """A user's pyro.param in PhysicsConditionedGP.model is learned by the L-BFGS fit (it
    ends at its factor's optimum, 2) and the coefficient still fits; a sample site is
    refused in one line without a guide and fitted with guide='normal'."""
    t = torch.linspace(0, 2, 20, dtype=D)
    eq = lambda: physics.Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",),  # noqa: E731
                                  k=pk.Parameter(1.0))
    model = ConditionedWithExtra(t, torch.exp(-1.3 * t), eq())
    pk.fit(model, progress=False)
    assert float(user_params(model)["a"]) == pytest.approx(2.0, abs=1e-2)
    assert model.equation_parameters()["k"] == pytest.approx(1.3, rel=1e-2)
    site = ConditionedWithSite(t, torch.exp(-1.3 * t), eq())
    with pytest.raises(ValueError, match="guide='normal'") as info:
        pk.fit(site, progress=False)
    assert "\n" not in str(info.value)
    result = pk.fit(site, progress=False, guide="normal", num_steps=30)
    guide = getattr(result.guide, "guide", result.guide)
    assert "s" in guide.median()
