"""NUTS over a population (issue 65): Pyro's NUTS on PopulationODE.model, non-centred, from
the Laplace fit; its summary speaks the fit's names; against a conjugate closed form and a
simulated population's truth."""

import math

import numpy as np
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.population import (GroupedData, PopulationODE, Random, Shared, fit_population,
                                   sample_population, simulate_population)


def oral(f, x, ka, ke, cl):
    A, C = f["A"], f["C"]
    return (A.d("t") + ka * A, C.d("t") - ka * ke / cl * A + ke * C)


def oral_population(groups, seed):
    system = pk.EquationSystem(oral, outputs=("A", "C"), inputs=("t",), ka=1.5, ke=0.1,
                               cl=0.04)
    data, truth = simulate_population(
        system, np.array([0.5, 1, 2, 4, 8, 24.0]), {"A": "Dose", "C": 0.0},
        {"ka": Random(1.5, sd=0.3), "ke": Shared(0.1), "cl": Random(0.04, sd=0.2)},
        {"ka": 0.3, "cl": 0.2}, 0.1, groups=groups, noise="log",
        covariates={"Dose": np.full(groups, 4.0)}, seed=seed, observe=("C",))
    pop = PopulationODE(system, data, {"A": "Dose", "C": 0.0},
                        {"ka": Random(1.0), "ke": Shared(0.2), "cl": Random(0.05)}, noise="log")
    return pop, truth


def test_draws_speak_the_fits_names_and_the_groups_curves_hold_their_draws():
    pop, _ = oral_population(groups=4, seed=3)
    assert pop.affine
    fit = fit_population(pop, branches=False)
    s = sample_population(pop, fit, num_warmup=10, num_samples=8, num_chains=2,
                          progress=False, jit=False)
    summary = s.summary()
    assert set(summary) == set(fit.intervals())
    assert s.draws["beta"].shape == (2, 8, 3) and s.draws["eta"].shape == (2, 8, 4, 2)
    for r in summary.values():
        assert r["lower"] <= r["median"] <= r["upper"] and r["sd"] >= 0
        assert not math.isnan(r["r_hat"]) and r["n_eff"] > 0
    assert (s.draws["omega_sd"] > 0).all() and (s.draws["sigma"] > 0).all()
    g = s.groups()
    assert list(g) == list(pop.data.labels)
    band = s.predict(np.linspace(0, 24, 7), group=pop.data.labels[1])["C"]
    assert (band["lower"] <= band["median"] + 1e-12).all()
    assert (band["median"] <= band["upper"] + 1e-12).all()
    tree = s.to_datatree()
    assert tree.posterior["eta"].shape == (2, 8, 4, 2)
    assert tree.sample_stats["diverging"].shape == (2, 8)
    # a fit whose group variances are not finite (a group its data do not identify) still
    # starts the chains: that group is drawn non-centred
    import dataclasses
    cov = fit.phi_cov.copy()
    cov[0] = np.nan
    odd = sample_population(pop, dataclasses.replace(fit, phi_cov=cov), num_warmup=4,
                            num_samples=4, num_chains=1, progress=False, jit=False)
    assert torch.isfinite(odd.draws["beta"]).all()
    other, _ = oral_population(groups=4, seed=4)
    with pytest.raises(ValueError, match="PopulationFit of this PopulationODE"):
        sample_population(other, fit, num_samples=4, progress=False)
    with pytest.raises(ValueError, match="num_samples \\(split R-hat needs 4\\) to be an integer"):
        sample_population(pop, fit, num_samples=3, progress=False)


@pytest.mark.slow
def test_a_population_of_constants_has_the_conjugate_posterior_of_its_mean():
    r"""f' = 0 with f(0) = mu + eta_i: with the between-group sd and the noise held near
    their values the posterior of mu is nearly the normal closed form; NUTS over everything
    must put mu's posterior mean and sd near the closed form at the draws' own sds."""
    rng = np.random.default_rng(11)
    G, n = 8, 5
    y = 2.0 + rng.normal(0, 0.5, G)[:, None] + rng.normal(0, 0.3, (G, n))

    def constant(f, x, k):
        return (f["f"].d("t") + k * f["f"],)
    system = pk.EquationSystem(constant, outputs=("f",), inputs=("t",),
                               k=pk.Parameter(0.0, fixed=True))
    data = GroupedData(np.repeat(np.arange(G), n), np.tile(np.linspace(0, 1, n), G),
                       {"f": y.ravel()})
    pop = PopulationODE(system, data, initial={"f": Random(1.0, sd=0.5)})
    fit = fit_population(pop, branches=False)
    s = sample_population(pop, fit, num_warmup=300, num_samples=400, num_chains=2,
                          progress=False)
    mu = s.parameters()["f0"].reshape(-1).numpy()
    omega = s.parameters()["sd(f0)"].reshape(-1).numpy()
    sigma = s.parameters()["sigma(f)"].reshape(-1).numpy()
    # mu | omega, sigma, y is normal: precision sum_i n / (n omega^2 + sigma^2) (prior sd 10)
    w = n / (n * omega ** 2 + sigma ** 2)
    prec = G * w + 1 / 100.0
    mean = (w * y.mean(1).sum() + pop.beta_start[0].item() / 100.0) / prec
    # the Rao-Blackwellised mean and the law of total variance over the drawn sds
    want_mean = mean.mean()
    want_sd = math.sqrt((1 / prec).mean() + mean.var())
    assert mu.mean() == pytest.approx(want_mean, abs=0.25 * want_sd)
    assert mu.std() == pytest.approx(want_sd, rel=0.2)
    assert max(v["r_hat"] for v in s.summary().values()) < 1.05
    assert s.divergences == 0


@pytest.mark.slow
def test_nuts_over_a_simulated_population_covers_its_truth_and_agrees_with_laplace():
    pop, truth = oral_population(groups=10, seed=7)
    fit = fit_population(pop, branches=False)
    s = sample_population(pop, fit, num_warmup=300, num_samples=300, num_chains=2,
                          progress=False)
    summary, laplace = s.summary(prob=0.99), fit.intervals()
    for name in ("ka", "ke", "cl"):
        r = summary[name]
        assert r["lower"] <= truth["beta"][name] <= r["upper"], (name, r, truth["beta"])
        # the mode (Laplace) within one posterior sd of the posterior mean
        assert abs(laplace[name]["log"][0] - r["mean"]) < r["sd"], (name, r, laplace[name])
        assert r["r_hat"] < 1.05
    assert s.divergences <= 6
