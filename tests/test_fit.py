import math

import numpy as np
import pyro
import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl import physics
from pyro_pidkl.physics import Equation, Parameter


def _decay(n=25, rate=2.0):
    t = np.linspace(0, 1, n)[:, None]
    return t, 1.5 * np.exp(-rate * t[:, 0])


def test_fit_records_history_and_lowers_the_loss():
    t, y = _decay()
    model = pk.models.DKL(t, y)
    result = pk.fit(model, num_steps=60, lr=0.02, progress=False)
    assert result.num_steps == 60 and len(result.losses) == 60 and result.seconds > 0
    assert np.mean(result.losses[-5:]) < np.mean(result.losses[:5])
    assert "FitResult(num_steps=60" in repr(result)


def test_divergence_stops_the_fit_and_keeps_the_last_finite_parameters():
    t, y = _decay()
    calls = {"n": 0}

    def explodes(f, x, k):
        calls["n"] += 1
        bad = calls["n"] > 4          # 1 probe + 3 good steps, then NaN
        return f.d("t") + k * f + (math.nan if bad else 0.0)
    model = pk.PIDKL(t, y, Equation(explodes, inputs=("t",), k=1.0), m=5)
    with pytest.raises(pk.FitDivergedError, match="diverged at step 3") as info:
        pk.fit(model, num_steps=10, progress=False)
    assert info.value.step == 3 and len(info.value.history) == 3
    assert all(math.isfinite(v) for v in info.value.history)
    for p in model.parameters():
        assert torch.isfinite(p).all()
    assert math.isfinite(model.physics.equation.k.item())


def test_fit_rejects_bad_settings():
    model = pk.models.DKL(*_decay())
    with pytest.raises(ValueError, match="num_steps"):
        pk.fit(model, num_steps=-1)
    with pytest.raises(ValueError, match="lr to be a finite number > 0"):
        pk.fit(model, lr=0.0)
    with pytest.raises(ValueError, match="num_particles"):
        pk.fit(model, num_particles=0)
    with pytest.raises(ValueError, match="lr_final"):
        pk.fit(model, lr=0.01, lr_final=0.1)


def test_models_fitted_in_one_process_keep_their_own_parameters():
    t, y = _decay()
    pyro.set_rng_seed(0)
    a = pk.models.DKL(t, y)
    pk.fit(a, num_steps=30, lr=0.05, progress=False)
    noise_a = a.noise_variance()
    pyro.set_rng_seed(0)
    b = pk.models.DKL(t, y)
    noise_b0 = b.noise_variance()
    b(t)                           # predictions must not pull a's values into b
    assert b.noise_variance() == noise_b0 != noise_a
    assert a.noise_variance() == noise_a


def test_predicting_with_one_model_does_not_change_another():
    # a PyroModule adopts any value the global param store holds under its names: predicting
    # with a, then b, used to give b a's kernel hyperparameters, for good
    t, y = _decay()
    models = []
    for seed in (0, 1):
        pyro.set_rng_seed(seed)
        models.append(pk.models.DKL(t, y))
        pk.fit(models[-1], num_steps=30, lr=0.05, progress=False)
    a, b = models
    pyro.clear_param_store()
    alone = b(t)[0]
    pyro.clear_param_store()
    a(t)
    after_a = b(t)[0]
    assert torch.equal(alone, after_a)
    assert not torch.equal(a(t)[0], after_a)
    assert float(a.kernel.kern.lengthscale.detach()) != float(b.kernel.kern.lengthscale.detach())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_fit_recovers_the_decay_rate_of_a_noise_free_exponential(seed):
    """f = 1.5 exp(-2 t) solves f_t + B f = 0 only for B = 2; B starts at 0.5."""
    t, y = _decay(rate=2.0)
    pyro.set_rng_seed(seed)
    eq = physics.first_order_ode(B=0.5, D=Parameter(0.0, fixed=True))
    model = pk.PIDKL(t, y, eq, gamma=1.0, m=30)
    pk.fit(model, num_steps=600, lr=0.02, lr_final=0.002, num_particles=8, progress=False)
    B = model.physics.equation.B.item()
    assert abs(B - 2.0) / 2.0 < 0.10, B


def test_the_default_optimiser_is_pyro_adam_in_fewer_ops():
    """fit's default (one foreach torch Adam over all parameters) against the plain path
    (``pyro.optim.Adam``, one optimiser per tensor): the same losses and parameters."""
    import copy

    import pyro
    import torch

    from pyro_pidkl import PIDKL, fit, physics

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (30, 2))
    y = np.sin(3 * X[:, 0]) * np.exp(-X[:, 1])
    model = PIDKL(X, y, physics.heat_1d(alpha=0.5), input_names=("x", "t"), m=8, seed=0)
    twin = copy.deepcopy(model)
    fast = fit(model, num_steps=20, lr=0.02, seed=3, progress=False)
    plain = fit(twin, num_steps=20, lr=0.02, seed=3, progress=False,
                optimizer=pyro.optim.Adam({"lr": 0.02}))
    np.testing.assert_allclose(fast.losses, plain.losses, rtol=0, atol=1e-10)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


def _models_for_the_elbo():
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (25, 2))
    y = np.sin(3 * X[:, 0]) * np.exp(-X[:, 1])
    names = ("x", "t")
    heat = physics.heat_1d(alpha=0.5)
    return {
        "pidkl": lambda: pk.PIDKL(X, y, heat, input_names=names, m=6, seed=0),
        "pidkl-pointwise": lambda: pk.PIDKL(X, y, heat, input_names=names, m=6, seed=0,
                                            draw="pointwise", gamma=3.0),
        "dkl": lambda: pk.models.DKL(X, y, input_names=names, seed=0),
        "pi-skl-gaussian": lambda: pk.models.SKL(
            X, y, input_names=names, physics=pk.physics.PhysicsTerm(
            heat, m=5, domain=physics.Gaussian())),
        "burgers-autograd": lambda: pk.PIDKL(X, y, physics.burgers_1d(nu=0.1), input_names=names,
                                             m=5, seed=0, derivatives="autograd"),
        "conditioned": lambda: pk.PhysicsConditionedGP(X, y, heat, input_names=names,
                                                        collocation=12, source="gp"),
    }


@pytest.mark.parametrize("name", list(_models_for_the_elbo()))
def test_the_default_elbo_equals_trace_elbo(name):
    """The default (PriorGuideELBO: the model run once, latent sites from their priors)
    against the plain path (Trace_ELBO: guide traced, model replayed, both scored): the same
    loss and the same gradients, to 1e-10, from one random state."""
    from pyro.infer import Trace_ELBO

    model = _models_for_the_elbo()[name]()
    elbo = pk.infer.default_elbo(model)
    assert isinstance(elbo, pk.infer.PriorGuideELBO) and model.guide_is_prior
    out = []
    for loss in (elbo, Trace_ELBO()):
        pyro.clear_param_store()
        pyro.set_rng_seed(7)
        with pyro.poutine.trace(param_only=True) as tr:
            value = loss.loss_and_grads(model.model, model.guide)
        params = {n: s["value"].unconstrained() for n, s in tr.trace.nodes.items()}
        out.append((value, {n: p.grad.clone() for n, p in params.items()}))
        for p in params.values():
            p.grad = None
    (fast, g_fast), (plain, g_plain) = out
    assert math.isfinite(fast) and abs(fast - plain) <= 1e-10 * max(1.0, abs(plain))
    assert g_fast.keys() == g_plain.keys() and len(g_fast) >= 3
    for n in g_plain:
        torch.testing.assert_close(g_fast[n], g_plain[n], rtol=1e-10, atol=1e-10)


def test_the_default_elbo_hands_other_guides_to_trace_elbo():
    """A learned guide (a Bayesian equation parameter, a user's guide) or several particles:
    Trace_ELBO's own computation, not the one-pass one; a latent site the model did not
    declare stops the step."""
    from pyro.infer.elbo import ELBO
    from pyro.infer import Trace_ELBO

    from pyro_pidkl.infer.elbo import PriorGuideELBO, guide_is_prior

    t, y = _decay()
    bayes = pk.PIDKL(t, y, physics.first_order_ode(
        B=Parameter(1.0, prior=pyro.distributions.LogNormal(0.0, 1.0)), D=0.1), m=5, seed=0)
    plain = pk.PIDKL(t, y, physics.first_order_ode(B=1.0, D=0.1), m=5, seed=0)
    assert not bayes.guide_is_prior and plain.guide_is_prior
    assert not guide_is_prior(bayes.model, bayes.guide)
    assert not guide_is_prior(plain.model, lambda: None)        # not the model's own guide
    assert guide_is_prior(plain.model, plain.guide)
    assert not PriorGuideELBO(num_particles=2)._direct(plain.model, plain.guide)
    calls = []
    original = Trace_ELBO.loss_and_grads

    def spy(self, model, guide, *args, **kwargs):
        calls.append(type(self))
        return original(self, model, guide, *args, **kwargs)
    try:
        Trace_ELBO.loss_and_grads = spy
        pyro.clear_param_store()
        assert math.isfinite(PriorGuideELBO().loss_and_grads(bayes.model, bayes.guide))
        assert calls == [PriorGuideELBO]                 # went through Trace_ELBO's path
        calls.clear()
        PriorGuideELBO().loss_and_grads(plain.model, plain.guide)
        assert calls == []                               # the one-pass path
    finally:
        Trace_ELBO.loss_and_grads = original
        pyro.clear_param_store()
    assert issubclass(PriorGuideELBO, ELBO)

    class Extra(pk.models.DKL):
        def model(self):
            pyro.sample("w", pyro.distributions.Normal(0.0, 1.0))
            return super().model()
    extra = Extra(t, y, seed=0)
    with pytest.raises(ValueError, match="latent site 'w'"):
        PriorGuideELBO().loss(extra.model, extra.guide)


def test_thread_policy_one_thread_for_small_fits_and_the_setting_put_back(monkeypatch):
    """``threads="auto"``: one thread for a small problem, torch's setting for a large one or
    when the environment sets a count; the process's count is the same after the fit, and
    the result records what the fit ran with."""
    from pyro_pidkl.infer.threads import LARGE_PROBLEM, fit_threads, problem_size
    monkeypatch.delenv("PIDKL_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    X = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
    model = pk.models.SKL(X, torch.sin(6 * X[:, 0]))
    assert problem_size(model) == 20 and fit_threads(model) == 1
    assert fit_threads(model, None) is None and fit_threads(model, 3) == 3
    big = pk.models.SKL(torch.rand(LARGE_PROBLEM + 1, 1, dtype=torch.float64),
                 torch.rand(LARGE_PROBLEM + 1, dtype=torch.float64))
    assert fit_threads(big) is None
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert fit_threads(model) is None
    monkeypatch.setenv("PIDKL_THREADS", "2")
    assert fit_threads(model) == 2
    monkeypatch.setenv("PIDKL_THREADS", "two")
    with pytest.raises(ValueError, match="PIDKL_THREADS"):
        fit_threads(model)
    with pytest.raises(ValueError, match="threads to be 'auto', None or an integer"):
        fit_threads(model, 0)
    monkeypatch.delenv("PIDKL_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    before = torch.get_num_threads()
    seen = []
    result = pk.fit(model, num_steps=3, progress=False, method="adam",
                    callback=lambda step, loss: seen.append(torch.get_num_threads()))
    assert seen == [1, 1, 1] and result.threads == 1
    assert torch.get_num_threads() == before
    result = pk.fit(model, num_steps=2, progress=False, method="adam", threads=None,
                    callback=lambda step, loss: seen.append(torch.get_num_threads()))
    assert seen[-1] == before and result.threads == before
