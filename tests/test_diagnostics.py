import math

import numpy as np
import pytest
import torch
from scipy import stats

import pyro_pidkl as pk
from pyro_pidkl import diagnostics as dg
from pyro_pidkl.diagnostics import plots


def _fitted(n=30, seed=0, mean="zero"):
    t = np.linspace(0, 1, n)[:, None]
    y = np.sin(6 * t[:, 0]) + 0.1 * np.random.default_rng(seed).standard_normal(n)
    model = pk.models.SKL(t, y, input_names=("t",), mean=mean)
    pk.fit(model, 150, lr=0.05, progress=False)
    return model


def test_datatree_has_the_expected_groups_dims_and_shapes():
    model = _fitted()
    Xt = np.linspace(0, 1, 17)[:, None]
    tree = dg.to_datatree(model, Xt, np.sin(6 * Xt[:, 0]), num_samples=50)
    assert {"posterior", "posterior_predictive", "log_likelihood", "observed_data"} <= set(
        tree.children)
    pp = tree["posterior_predictive"]
    assert pp["y"].shape == (1, 50, 17) and pp["f"].dims == ("chain", "draw", "test")
    assert tree["posterior"]["f_train"].shape == (1, 50, 30)
    assert tree["log_likelihood"]["y_train"].dims == ("chain", "draw", "train")
    np.testing.assert_allclose(pp["test_t"].values, Xt[:, 0])
    np.testing.assert_allclose(tree["observed_data"]["train_t"].values, np.linspace(0, 1, 30))
    with pytest.raises(ValueError, match=r"y_test to have shape \(17,\)"):
        dg.to_datatree(model, Xt, np.zeros(3))


def test_pidkl_datatree_carries_the_equation_parameters():
    t = np.linspace(0, 1, 12)[:, None]
    model = pk.PIDKL(t, np.exp(-t[:, 0]), pk.physics.first_order_ode(B=0.7), m=5)
    tree = dg.to_datatree(model, t, num_samples=10)
    assert float(tree["posterior"]["B"].values.mean()) == pytest.approx(0.7)
    assert "y" not in tree["observed_data"]


def test_psis_loo_agrees_with_the_exact_gp_loo():
    model = _fitted()
    tree = dg.to_datatree(model, np.zeros((1, 1)), num_samples=2000, seed=1)
    res = dg.loo(tree)
    _, _, exact = dg.exact_loo(model)
    assert abs(res.elpd - exact) < 1.0


@pytest.mark.parametrize("prior_mean", ["zero", "constant"])
def test_exact_loo_matches_refitting_without_each_point(prior_mean):
    model = _fitted(12, mean=prior_mean)
    c = model.mean_constant.item() if prior_mean == "constant" else 0.0
    assert prior_mean == "zero" or abs(c) > 1e-3        # the offset moved: the test can tell
    mean, var, _ = dg.exact_loo(model)
    st = model.standardizer
    for i in (0, 5, 11):
        keep = np.arange(12) != i
        K = (model.kernel(model.X_s).detach() + model.noise.detach() * torch.eye(12)).numpy()
        Kk = K[np.ix_(keep, keep)]
        ks = K[i, keep]
        mu = c + ks @ np.linalg.solve(Kk, model.y_s.numpy()[keep] - c)
        v = K[i, i] - ks @ np.linalg.solve(Kk, ks)
        assert float(mean[i]) == pytest.approx(float(st.f_to_user(torch.tensor(mu))), rel=1e-8)
        assert float(var[i]) == pytest.approx(float(st.var_to_user(torch.tensor(v))), rel=1e-8)


def test_test_log_density_of_a_known_gaussian_is_the_closed_form():
    y = np.array([0.3, -1.2, 2.0])
    s = dg.predictive_scores(np.zeros(3), np.full(3, 4.0), y)
    expected = np.mean(stats.norm(0, 2).logpdf(y))
    assert s["test_lpd"] == pytest.approx(expected, rel=1e-12)


def test_coverage_of_draws_from_the_true_model_is_nominal():
    rng = np.random.default_rng(0)
    n = 20000
    mean, sd = rng.normal(size=n), rng.uniform(0.5, 2.0, n)
    y = mean + sd * rng.normal(size=n)
    s = dg.predictive_scores(mean, sd ** 2, y)
    for level, cov in s["coverage"].items():
        assert abs(cov - level) < 4 * math.sqrt(level * (1 - level) / n)
    assert s["pit_ks_pvalue"] > 1e-3


def test_pit_detects_a_miscalibrated_model():
    rng = np.random.default_rng(1)
    y = rng.normal(size=2000)
    over = dg.predictive_scores(np.zeros(2000), np.full(2000, 0.25), y)   # sd too small
    under = dg.predictive_scores(np.zeros(2000), np.full(2000, 4.0), y)   # sd too large
    assert over["pit_ks_pvalue"] < 1e-6 and under["pit_ks_pvalue"] < 1e-6
    assert over["coverage"][0.95] < 0.8 and under["coverage"][0.5] > 0.8


def test_calibration_and_comparison_plots(tmp_path):
    rng = np.random.default_rng(2)
    y = rng.normal(size=300)
    scores = {"a": dg.predictive_scores(np.zeros(300), np.ones(300), y),
              "b": dg.predictive_scores(np.zeros(300), np.full(300, 0.3), y)}
    pits = {"a": dg.pit(0, 1, y), "b": dg.pit(0, 0.3, y)}
    assert plots.calibration(scores, pits, tmp_path / "c.png").stat().st_size > 5000
    rows = [{"method": "a", "nrmse": (1, 0.9, 1.1), "test_lpd": (-1, -1.2, -0.9)}]
    assert plots.comparison(rows, tmp_path / "d.png").stat().st_size > 5000


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")  # the unfitted model
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_compare_ranks_a_good_fit_above_a_bad_one():
    good = _fitted()
    t = good.X.numpy()
    bad = pk.models.SKL(t, good.y.numpy(), input_names=("t",))   # unfitted: lengthscale 1
    trees = {name: dg.to_datatree(m, t[:2], num_samples=400) for name, m in
             (("good", good), ("bad", bad))}
    table = dg.compare(trees)
    assert list(table.index) == ["good", "bad"]


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
def test_datatree_of_dense_noise_free_training_data():
    """100 points 0.001 apart with a floor-level noise: the posterior covariance of f at the
    training inputs is numerically singular; drawing from it must still work."""
    data = pk.datasets.simulate_first_order_ode()
    model = pk.models.DKL(data.X_train, data.y_train, input_names=("t",))
    pk.fit(model, 100, lr=0.01, progress=False)
    tree = dg.to_datatree(model, data.X_test[:3], num_samples=300)
    assert np.isfinite(tree["posterior"]["f_train"].values).all()
    assert abs(dg.loo(tree).elpd - dg.exact_loo(model)[2]) < 5.0


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
def test_inputs_named_like_variables_do_not_clobber_them():
    # Jura's inputs are named x, y: the coordinates must not replace the variable y_train
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (20, 2))
    model = pk.models.SKL(X, np.sin(4 * X[:, 0]) + X[:, 1], input_names=("x", "y"))
    tree = dg.to_datatree(model, X[:3], num_samples=50, seed=0)
    assert tree["log_likelihood"]["y_train"].dims == ("chain", "draw", "train")
    np.testing.assert_allclose(tree["observed_data"]["train_y"].values, X[:, 1])
    assert np.isfinite(float(dg.loo(tree).elpd))


def _first_order(model_name):
    """A quickly fitted model of the first-order ODE example, by name."""
    import pyro
    import pyro.distributions as dist
    from pyro_pidkl.physics import Parameter, first_order_ode
    data = pk.datasets.simulate_first_order_ode()
    X, y, box = data.X_train, data.y_train, pk.Box(t=(0.0, 1.0))
    pyro.set_rng_seed(0)
    model = {
        "SparseGP": lambda: pk.models.SparseGP(X, y, num_inducing=10),
        "LFM": lambda: pk.models.LFM(X, y, equation="ode", time="t", input_names=("t",)),
        "PIDKL-bayes": lambda: pk.PIDKL(X, y, first_order_ode(
            B=Parameter(0.5, prior=dist.LogNormal(0.0, 1.0)), D=0.5), domain=box, m=5),
        "PhysicsConditionedGP": lambda: pk.PhysicsConditionedGP(
            X, y, first_order_ode(B=0.5, D=0.5), domain=box, source="gp"),
    }[model_name]()
    if getattr(model, "deterministic", False):
        pk.fit(model, progress=False)
    else:
        pk.fit(model, num_steps=40, progress=False)
    return model, data


@pytest.mark.parametrize("name", ["SparseGP", "LFM", "PIDKL-bayes", "PhysicsConditionedGP"])
def test_every_model_has_an_arviz_tree_with_loo(name):
    """Sparse (marginal draws at the training inputs), latent force, PI-DKL with a prior on
    a coefficient (its guide's draws in the posterior group, not a constant) and the
    conditioned GP: the four groups, shapes by input name, a finite PSIS-LOO."""
    model, data = _first_order(name)
    tree = dg.to_datatree(model, data.X_test[::10], data.y_test[::10], num_samples=80)
    assert {"posterior", "posterior_predictive", "log_likelihood", "observed_data"} <= set(
        tree.children)
    n_test = data.X_test[::10].shape[0]
    assert tree["posterior_predictive"]["y"].shape == (1, 80, n_test)
    assert tree["log_likelihood"]["y_train"].shape == (1, 80, data.X_train.shape[0])
    assert math.isfinite(float(dg.loo(tree).elpd))
    if name == "PIDKL-bayes":
        B = tree["posterior"]["B"].values
        assert B.shape == (1, 80) and B.std() > 0


@pytest.mark.slow
def test_a_systems_arviz_tree_has_an_output_dim_and_a_likelihood_per_output():
    """ConditionedSystemGP: f and y (chain, draw, test, output) named by output, one
    pointwise log likelihood per observed output (each at its own times), LOO of each; NUTS
    over the system's coefficients and GP parameters, with its own tree."""
    problem = pk.datasets.system_problem("lotka_volterra", 0)
    model = pk.ConditionedSystemGP(problem.system, problem.data, domain=problem.domain,
                                   collocation=60)
    pk.fit(model, progress=False)
    tree = dg.to_datatree(model, problem.test[::5], num_samples=60)
    f = tree["posterior_predictive"]["f"]
    assert f.shape == (1, 60, problem.test[::5].shape[0], 2)
    assert list(f["output"].values) == ["x", "y"]
    assert set(tree["log_likelihood"].data_vars) == {"y_x", "y_y"}
    for var in ("y_x", "y_y"):
        assert math.isfinite(float(dg.loo(tree, var).elpd))
    # NUTS takes a system too: its coefficients and GPs' parameters, and the draws' tree
    post = pk.infer.sample_coefficients(model, num_warmup=15, num_samples=15, seed=0)
    assert post.coefficients == ["alpha", "beta", "delta", "gamma"]
    assert "kernels.0.lengthscale" in post.samples
    drawn = post.to_datatree(problem.test[::5], num_draws=15)
    assert drawn["posterior_predictive"]["f"].shape == (1, 15, problem.test[::5].shape[0], 2)
    # and an autoguide (the system's own parameter sites kept out of the SVI trace)
    guide = pk.infer.fit_coefficient_guide(model, guide="normal", num_steps=5, num_samples=20)
    assert guide.samples["alpha"].shape == (20,) and len(guide.losses) == 5
