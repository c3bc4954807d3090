import math

import numpy as np
import pyro
import pytest
import torch
from scipy import integrate, stats

from pyro_pidkl import PIDKL, fit, physics
from pyro_pidkl.diagnostics import crps
from pyro_pidkl.infer import Ensemble, fit_restarts, training_objective
from pyro_pidkl.kernels import MLP
from pyro_pidkl.models import DKL
from pyro_pidkl.physics.domain import Box


@pytest.mark.parametrize("mean, sd, y", [(0.0, 1.0, 0.3), (1.5, 0.2, 1.0), (-2.0, 3.0, 4.0)])
def test_crps_matches_the_integral_of_the_squared_cdf_difference(mean, sd, y):
    F = stats.norm(mean, sd).cdf
    left, _ = integrate.quad(lambda x: F(x) ** 2, mean - 40 * sd, y)
    right, _ = integrate.quad(lambda x: (1 - F(x)) ** 2, y, mean + 40 * sd)
    assert crps([mean], [sd ** 2], [y]) == pytest.approx(left + right, rel=1e-7)


def test_crps_of_a_sharp_forecast_is_the_absolute_error_and_is_proper():
    assert crps([1.0, -1.0], [1e-14, 1e-14], [1.5, 0.0]) == pytest.approx(0.75, abs=1e-6)
    # expected score under y ~ N(0, 1) is lowest for the true variance
    y = torch.distributions.Normal(0.0, 1.0).sample((200_000,)).double()
    z = torch.zeros_like(y)
    scores = [crps(z, torch.full_like(y, v), y) for v in (0.5, 1.0, 2.0)]
    assert scores[1] < scores[0] and scores[1] < scores[2]


class _Fixed:
    """A stand-in fitted model with a known Gaussian predictive."""

    def __init__(self, mean, var, noise):
        self.mean, self.var, self.noise = (torch.tensor(mean, dtype=torch.float64),
                                           torch.tensor(var, dtype=torch.float64), noise)

    def __call__(self, X, noiseless=True, full_cov=False):
        var = self.var + (0.0 if noiseless else self.noise)
        return self.mean.clone(), (torch.diag(var) if full_cov else var)

    def noise_variance(self):
        return self.noise

    def equation_parameters(self):
        return {"a": float(self.mean[0])}


def test_ensemble_moments_follow_the_law_of_total_variance():
    a, b, c = _Fixed([0.0, 1.0], [1.0, 0.5], 0.1), _Fixed([2.0, 1.0], [0.5, 0.5], 0.3), \
        _Fixed([4.0, 4.0], [0.25, 2.0], 0.2)
    ens = Ensemble([a, b, c])
    mean, var = ens(None)
    # point 0: mixture of N(0,1), N(2,.5), N(4,.25)
    mu = (0 + 2 + 4) / 3
    v = (1 + 0.5 + 0.25) / 3 + ((0 - mu) ** 2 + (2 - mu) ** 2 + (4 - mu) ** 2) / 3
    assert mean[0].item() == pytest.approx(mu) and var[0].item() == pytest.approx(v)
    # and against draws from the mixture
    rng = np.random.default_rng(0)
    k = rng.integers(0, 3, 400_000)
    draws = rng.normal(np.array([0.0, 2.0, 4.0])[k], np.sqrt(np.array([1.0, 0.5, 0.25])[k]))
    assert draws.var() == pytest.approx(v, rel=0.01)
    _, var_y = ens(None, noiseless=False)
    assert var_y[1].item() == pytest.approx(var[1].item() + 0.2)  # mean noise added
    assert ens.noise_variance() == [0.1, 0.3, 0.2]
    assert ens.equation_parameters() == {"a": 2.0}
    assert Ensemble([a, b, c, _Fixed([7.0], [1.0], 0.1)]).equation_parameters() == {"a": 3.0}
    _, cov = ens(None, full_cov=True)
    assert torch.allclose(cov.diagonal(), var)
    # off the diagonal only the spread of the means: Cov_r(mu_r[0], mu_r[1])
    mu0, mu1 = torch.tensor([0.0, 2.0, 4.0]), torch.tensor([1.0, 1.0, 4.0])
    expected = ((mu0 - mu0.mean()) * (mu1 - mu1.mean())).mean()
    assert cov[0, 1].item() == pytest.approx(expected.item()) == cov[1, 0].item()
    one_mean, one_var = Ensemble([b])(None)
    assert torch.equal(one_mean, b.mean) and torch.allclose(one_var, b.var)
    with pytest.raises(ValueError, match="at least one fitted model"):
        Ensemble([])


def _ode_data(n=25):
    t = torch.linspace(0, 0.5, n, dtype=torch.float64)
    return t[:, None], torch.exp(-t) + 0.1 * torch.sin(6 * t)


def test_restart_zero_is_the_single_fit_and_restarts_differ():
    X, y = _ode_data()
    build = lambda: PIDKL(X, y, physics.first_order_ode(B=0.5, D=0.5), input_names=("t",),
                          gamma=1.0, m=5, domain=Box({"t": (0.0, 1.0)}),
                          feature_net=MLP(1, 2, width=8, depth=2, dtype=torch.float64))
    ens, results, objectives = fit_restarts(build, 3, seed=7, num_steps=15, progress=False)
    pyro.set_rng_seed(7)
    single = build()
    fit(single, num_steps=15, progress=False)
    Xt = torch.linspace(0.5, 1.0, 7, dtype=torch.float64)[:, None]
    assert torch.equal(ens.members[0](Xt)[0], single(Xt)[0])
    assert len(results) == 3 and all(r.num_steps == 15 for r in results)
    assert not torch.equal(ens.members[0](Xt)[0], ens.members[1](Xt)[0])
    assert len(objectives) == 3 and all(math.isfinite(o) for o in objectives)
    # the objective is a reproducible estimate of the fitted model's negative ELBO
    assert training_objective(single, 64, seed=7) == pytest.approx(objectives[0], rel=1e-10)
    with pytest.raises(ValueError, match="restarts"):
        fit_restarts(build, 0)
    shared_net = MLP(1, 2, width=8, depth=2, dtype=torch.float64)
    with pytest.raises(ValueError, match="restart 1 shares .* with restart 0"):
        fit_restarts(lambda: PIDKL(X, y, physics.first_order_ode(B=0.5, D=0.5),
                                   input_names=("t",), m=5, feature_net=shared_net),
                     2, num_steps=1, progress=False)
    # one Equation object for every restart: each takes a copy of it (its coefficients its
    # own), said in one line, so the restarts are fresh
    shared_equation = physics.first_order_ode(B=0.5, D=0.5)
    with pytest.warns(UserWarning, match="takes a copy"):
        ens, _, _ = fit_restarts(lambda: PIDKL(X, y, shared_equation, input_names=("t",), m=5),
                                 2, num_steps=1, progress=False)
    a, b = (m.physics.equation for m in ens.members)
    assert a is not b and a.B_unconstrained is not b.B_unconstrained


def test_training_objective_of_a_gp_without_sample_sites_is_its_negative_log_marginal():
    X, y = _ode_data()
    model = DKL(X, y, input_names=("t",),
                feature_net=MLP(1, 2, width=8, depth=2, dtype=torch.float64))
    fit(model, num_steps=10, progress=False)
    pyro.clear_param_store()
    with torch.no_grad():
        exact = -float(model.posterior().log_marginal())
    assert training_objective(model, 1) == pytest.approx(exact, rel=1e-10)
    assert training_objective(model, 16) == pytest.approx(exact, rel=1e-10)


def test_restart_methods_of_an_experiment(monkeypatch):
    import dataclasses

    from pyro_pidkl.paper.experiments import EXPERIMENTS
    from pyro_pidkl.paper.reproduce import run_one

    base = EXPERIMENTS["ode"]
    monkeypatch.setitem(EXPERIMENTS, "ode", dataclasses.replace(
        base, protocol=dataclasses.replace(base.protocol, restarts=3)))
    single = run_one("ode", "pidkl", 0, num_steps=8, keep_predictions=True)
    ens = run_one("ode", "pidkl-ens", 0, num_steps=8, keep_predictions=True)
    best = run_one("ode", "pidkl-best", 0, num_steps=8, keep_predictions=True)
    members = ens["predictions"]["members"]
    assert len(members) == 3 and ens["hyper"]["restart_seeds"] == [0, 1000, 2000]
    # restart 0 is the single fit; the record scores the members' mixture
    assert np.array_equal(members[0]["mean"], single["predictions"]["mean"])
    mix = np.mean([m["mean"] for m in members], axis=0)
    assert np.allclose(ens["predictions"]["mean"], mix)
    assert ens["loo_elpd"] is None and set(ens["hyper"]["learned"]) == {"B", "D"}
    # the best restart is the lowest training objective, the same fits in both methods
    assert best["hyper"]["training_objectives"] == ens["hyper"]["training_objectives"]
    k = int(np.argmin(ens["hyper"]["training_objectives"]))
    assert best["hyper"]["best_restart"] == k
    assert np.array_equal(best["predictions"]["mean"], members[k]["mean"])
    assert best["hyper"]["learned"] == ens["hyper"]["restart_learned"][k]
    monkeypatch.setitem(EXPERIMENTS, "ode", dataclasses.replace(
        base, protocol=dataclasses.replace(base.protocol, fixed=None)))
    with pytest.raises(ValueError, match="restarts the fixed PI-DKL configuration"):
        run_one("ode", "pidkl-ens", 0, num_steps=2)


def test_pidkl_fit_points_restart_methods_to_reproduce(capsys):
    from pyro_pidkl.paper.cli import main

    with pytest.raises(SystemExit):
        main(["fit", "ode", "--methods", "dkl,pidkl-best", "--steps", "1", "--quiet"])
    assert "pidkl reproduce ode --methods pidkl-best" in capsys.readouterr().err


def test_training_objective_leaves_the_param_store_and_random_state_as_they_were():
    X, y = _ode_data()
    model = DKL(X, y, input_names=("t",),
                feature_net=MLP(1, 2, width=8, depth=2, dtype=torch.float64))
    pyro.clear_param_store()
    kept = pyro.param("someone_elses", torch.tensor(3.0))
    pyro.set_rng_seed(5)
    expected = torch.rand(3)
    pyro.set_rng_seed(5)
    training_objective(model, 4)
    assert torch.equal(torch.rand(3), expected)  # the caller's random stream goes on as before
    assert list(pyro.get_param_store().keys()) == ["someone_elses"]
    assert pyro.param("someone_elses") is kept
    pyro.clear_param_store()
