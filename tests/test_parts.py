"""The parts a conditioned model takes (pyro_pidkl/models/parts/): each part and the older
keyword it replaces build the same model (same objective, same buffers), a field given both
ways or a bad value is refused in one line, and neither constructor takes more than twelve
named arguments."""

import inspect

import pytest
import torch

import pyro_pidkl as pk
from pyro_pidkl.infer import training_objective
from pyro_pidkl.physics import Equation, EquationSystem, Parameter

D = torch.float64


def _decay_data(n=12):
    t = torch.linspace(0, 3, n, dtype=D)[:, None]
    noise = 0.01 * torch.randn(n, generator=torch.Generator().manual_seed(0), dtype=D)
    return t, torch.exp(-0.7 * t[:, 0]) + noise


def _decay():
    return Equation(lambda f, x, k: f.d("t") + k * f, inputs=("t",), k=Parameter(1.0))


def _objective(model):
    return float(training_objective(model))


def test_each_part_builds_the_model_its_older_keywords_built():
    X, y = _decay_data()
    old = pk.PhysicsConditionedGP(X, y, _decay(), collocation=30, design="grid", seed=3,
                                  noise=1e-3, learn_noise=False, noise_floor=1e-9,
                                  source="gp", source_inputs=("t",), source_variance=0.2,
                                  residual_noise=1e-5, data_likelihood="exact",
                                  fit_collocation=20, collocation_refine=1)
    new = pk.PhysicsConditionedGP(
        X, y, _decay(), collocation=pk.Collocation(30, design="grid", seed=3, refine=1,
                                                   fit_subset=20),
        likelihood=pk.GaussianNoise(noise=1e-3, learn=False, floor=1e-9),
        source=pk.GPSource(inputs=("t",), variance=0.2), residual_noise=pk.ResidualNoise(1e-5),
        solver=pk.Dense())
    assert torch.equal(old.Z, new.Z) and float(old.noise) == float(new.noise) == 1e-3
    assert (old.data_likelihood, old.fit_collocation, old.collocation_refine) == \
        (new.data_likelihood, new.fit_collocation, new.collocation_refine) == ("exact", 20, 1)
    assert old.source_inputs() == new.source_inputs() == ("t",)
    assert _objective(old) == _objective(new)


def test_a_known_source_and_the_inducing_solver_as_parts():
    X, y = _decay_data()
    g = lambda x: 0.1 * torch.ones_like(x["t"])          # noqa: E731
    a = pk.PhysicsConditionedGP(X, y, _decay(), source=g, inducing=8, data_likelihood="inducing")
    b = pk.PhysicsConditionedGP(X, y, _decay(), source=pk.KnownSource(g),
                                solver=pk.Inducing(8))
    assert a.source_fn is b.source_fn is g and a.data_likelihood == b.data_likelihood
    assert int(a.inducing_count) == int(b.inducing_count) == 8
    assert _objective(a) == _objective(b)


def test_a_system_takes_likelihood_parts_per_output_and_for_all():
    t = torch.linspace(0, 4, 15, dtype=D)
    y = torch.poisson(5 * torch.exp(0.3 * t), generator=torch.Generator().manual_seed(1))
    system = EquationSystem(lambda f, x, r: (f["u"].d("t") - r,), outputs=("u",),
                            inputs=("t",), r=0.1)
    by_name = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods={"u": "poisson"})
    by_part = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods=pk.Poisson())
    assert by_name.likelihoods == by_part.likelihoods == ["poisson"]
    assert by_part.likelihood_parameters() == {"u": {"likelihood": "poisson"}}
    nb = pk.ConditionedSystemGP(system, {"u": (t, y)}, likelihoods=pk.NegativeBinomial())
    assert nb.likelihood_parameters()["u"]["dispersion"] == pytest.approx(10.0)  # its start
    assert _objective(by_name) == _objective(by_part)
    spring = EquationSystem(lambda f, x, k: (f["x"].d("t") - f["v"], f["v"].d("t") + k * f["x"]),
                            outputs=("x", "v"), inputs=("t",), k=1.0)
    x = torch.cos(t)
    held = pk.ConditionedSystemGP(spring, {"x": (t, x), "v": (t, -torch.sin(t))},
                                  likelihoods={"x": pk.GaussianNoise(noise=1e-3, learn=False)})
    assert held.noise_learned == [1] and float(held.noises()[0]) == 1e-3
    noise = held.likelihood_parameters()["x"]["noise"]             # in the data's units
    assert noise == pytest.approx(1e-3 * float(held.y_scale[0]) ** 2)
    old = pk.ConditionedSystemGP(spring, {"x": (t, x)}, noise=1e-3, learn_noise=False,
                                 design="grid", seed=2, collocation=20)
    new = pk.ConditionedSystemGP(spring, {"x": (t, x)}, collocation=pk.Collocation(
        20, design="grid", seed=2), likelihoods=pk.GaussianNoise(noise=1e-3, learn=False))
    assert torch.equal(old.Z, new.Z) and torch.equal(old.noises(), new.noises())


def test_parts_refuse_bad_values_and_double_settings_in_one_line():
    X, y = _decay_data()
    cases = [
        (lambda: pk.GaussianNoise(noise=-1.0), "noise to be a number > 0"),
        (lambda: pk.Collocation(design="halton"), "design to be one of"),
        (lambda: pk.Inducing(0), "count to be 'auto' or an integer"),
        (lambda: pk.GPSource(variance=0.0), "variance to be a number > 0"),
        (lambda: pk.ResidualNoise(1e-13, learn=True), "above residual_noise_floor"),
        (lambda: pk.PhysicsConditionedGP(X, y, _decay(), likelihood=pk.GaussianNoise(),
                                         noise=1e-3), "not both"),
        (lambda: pk.PhysicsConditionedGP(X, y, _decay(), collocation=pk.Collocation(20),
                                         seed=1), "not both"),
        (lambda: pk.PhysicsConditionedGP(X, y, _decay(), solver="cholesky"),
         "Expected solver to be"),
        (lambda: pk.PhysicsConditionedGP(X, y, _decay(), likelihood="student"),
         "Expected the likelihood to be"),
        (lambda: pk.PhysicsConditionedGP(X, y, _decay(), source=pk.GPSource(),
                                         source_variance=0.3), "not both"),
    ]
    for make, message in cases:
        with pytest.raises(ValueError, match=message) as e:
            make()
        assert "\n" not in str(e.value)
    system = EquationSystem(lambda f, x, r: (f["u"].d("t") - r,), outputs=("u",),
                            inputs=("t",), r=0.1)
    t = X[:, 0]
    with pytest.raises(ValueError, match="one noise floor"):
        pk.ConditionedSystemGP(system, {"u": (t, y)}, noise_floor=1e-6,
                               likelihoods={"u": pk.GaussianNoise(floor=1e-4)})
    refined = pk.ConditionedSystemGP(system, {"u": (t, y)},
                                     collocation=pk.Collocation(refine=2, fit_subset=20))
    assert (refined.collocation_refine, refined.fit_collocation) == (2, 20)
    with pytest.raises(ValueError, match="fit_subset to be"):
        pk.ConditionedSystemGP(system, {"u": (t, y)}, collocation=pk.Collocation(fit_subset=-3))
    with pytest.raises(TypeError, match="unexpected keyword"):
        pk.ConditionedSystemGP(system, {"u": (t, y)}, colocation=20)


def test_the_sparse_solvers_settings_are_a_part():
    axis = torch.linspace(0, 1, 9, dtype=D)
    grid = torch.cartesian_prod(axis, axis)
    edge = (grid == 0).any(1) | (grid == 1).any(1)
    eq = Equation(lambda f, x: -f.laplacian("x", "y"), inputs=("x", "y"))
    args = (grid[edge], torch.zeros(int(edge.sum()), dtype=D), eq, grid[~edge])
    old = pk.SparseCholeskySolver(*args, rho=3.0, dense_limit=0, cg_tol=1e-9)
    new = pk.SparseCholeskySolver(*args, settings=pk.SparseCholesky(rho=3.0, dense_limit=0,
                                                                   cg_tol=1e-9))
    for name in ("rho", "rho_preconditioner", "dense_limit", "cg_tol", "nugget", "lam"):
        assert getattr(old, name) == getattr(new, name)
    assert old.settings == new.settings
    with pytest.raises(ValueError, match="not both"):
        pk.SparseCholeskySolver(*args, settings=pk.SparseCholesky(), rho=3.0)


@pytest.mark.parametrize("cls", ["PhysicsConditionedGP", "ConditionedSystemGP",
                                 "SparseCholeskySolver"])
def test_no_constructor_takes_more_than_twelve_named_arguments(cls):
    params = [p for p in inspect.signature(getattr(pk, cls).__init__).parameters.values()
              if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    assert len(params) <= 12, [p.name for p in params]


def _block(path, marker):
    """The ```python block of ``path`` that contains ``marker``."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[1] / path).read_text()
    return next(b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if marker in b)


def test_the_readmes_and_the_guides_parts_blocks_build_the_models_they_say():
    """Each block alone (it builds its own data and equation), then what it built."""
    ns = {}
    exec(_block("README.md", "custom = pk.PhysicsConditionedGP("), ns)
    custom = ns["custom"]
    assert custom.source_kind == "gp" and custom.source_inputs() == ("t",)
    assert float(custom.noise) == 1e-3 and custom.Z.shape[0] == 400
    assert custom.data_likelihood == "exact" and float(custom.residual_noise) == 1e-6
    ns = {}
    exec(_block("docs/guide.md", "model = pk.PhysicsConditionedGP(\n    data.X_train,"), ns)
    assert ns["model"].collocation_refine == 0 and ns["model"].Z.shape[0] == 400
    ns = {}
    exec(_block("docs/guide.md", "model = pk.ConditionedSystemGP("), ns)
    model = ns["model"]
    assert model.likelihoods == ["lognormal", "negative_binomial", "gaussian"]
    assert model.gp_sources == [0] and model.ode is None
    assert model.counts == [15, 15, 0] and model.Z.shape[0] == 300 + 1