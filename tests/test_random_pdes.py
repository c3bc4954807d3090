"""benchmarks/random_pdes.py: the generator is the benchmark (the same problems for a seed,
new ones for another), its reference solutions solve their PDEs (the method of lines'
error falls as its grid is refined at second order; the 2+1 heat solution satisfies its
equation), and its summary scores what it says it scores."""

import importlib.util
from pathlib import Path

import numpy as np

_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("random_pdes", _DIR / "random_pdes.py")
random_pdes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(random_pdes)


def test_a_seed_draws_the_same_problems_and_another_seed_new_ones():
    a = [random_pdes.draw(3, i, max_points=600) for i in range(5)]
    b = [random_pdes.draw(3, i, max_points=600) for i in range(5)]
    c = [random_pdes.draw(4, i, max_points=600) for i in range(5)]
    assert all(x["truth"] == y["truth"] and np.array_equal(x["y"], y["y"])
               for x, y in zip(a, b))
    assert all(x["truth"] != y["truth"] for x, y in zip(a, c))
    for p in a + c:
        assert p["X"].shape == (p["points"], len(p["box"])) and np.isfinite(p["y"]).all()
        assert set(p["start"]) == set(p["learned"]) <= set(p["truth"])
        assert all(1 / 3 <= p["start"][n] / p["truth"][n] <= 3 for n in p["learned"])
        assert p["reference_error"] < 1e-3
        for k, (lo, hi) in enumerate(p["box"].values()):
            assert (p["X"][:, k] >= lo).all() and (p["X"][:, k] <= hi).all()


def test_the_method_of_lines_converges_at_second_order():
    """Advection-diffusion from three sine modes: the central-difference solution's distance
    to a fine one falls about fourfold when the nodes double."""
    truth, modes = {"c": 0.8, "D": 0.02}, np.array([0.9, -0.3, 0.1])
    times = np.linspace(0, 1, 5)
    x, fine = random_pdes._solve("advection_diffusion", truth, modes, 1.0, 1025, times)
    errors = []
    for nodes in (65, 129):
        xc, U = random_pdes._solve("advection_diffusion", truth, modes, 1.0, nodes, times)
        ref = fine[:, ::(1024 // (nodes - 1))]
        errors.append(np.abs(U - ref).max())
    assert 3.0 < errors[0] / errors[1] < 5.0, errors


def test_the_heat_solution_in_two_dimensions_solves_its_equation():
    """u_t = D (u_xx + u_yy) by central differences at random points, and zero on the edges."""
    D, modes = 0.05, np.array([0.7, -0.2, 0.1])
    rng = np.random.default_rng(0)
    P = rng.uniform(0.1, 0.9, (20, 3))
    h = 1e-4

    def u(dx=0.0, dy=0.0, dt=0.0):
        return random_pdes._heat2d(D, modes, P + np.array([dx, dy, dt]))
    u_t = (u(dt=h) - u(dt=-h)) / (2 * h)
    lap = (u(dx=h) + u(dx=-h) + u(dy=h) + u(dy=-h) - 4 * u()) / h ** 2
    assert np.allclose(u_t, D * lap, atol=1e-5)
    edge = np.c_[np.zeros(5), rng.uniform(size=5), rng.uniform(size=5)]
    assert np.allclose(random_pdes._heat2d(D, modes, edge), 0.0, atol=1e-12)


def test_the_summary_scores_misses_warnings_and_the_peer():
    """Two made-up records: a confident miss (identified, no warning, outside by more than
    its width) and an unresolved fit left unwarned; DeepXDE's errors beside."""
    def rec(index, value, lower, upper, between, warnings, peer):
        return {"seed": 0, "index": index, "family": "burgers", "truth": {"nu": 0.01},
                "learned": ["nu"],
                "library": {"cpu_s": 10.0, "between": between, "between_tol": 0.25,
                            "warnings": warnings, "coefficients": {"nu": {
                                "value": value, "lower": lower, "upper": upper,
                                "error": abs(value - 0.01) / 0.01,
                                "covers": lower <= 0.01 <= upper, "identified": True,
                                "confident_miss": (not warnings) and (
                                    min(abs(lower - 0.01), abs(upper - 0.01))
                                    > upper - lower and not lower <= 0.01 <= upper)}}},
                "deepxde": {"cpu_s": 100.0, "versions": {"deepxde": "x", "backend": "pytorch",
                                                         "torch": "y"},
                            "coefficients": {"nu": {"value": peer,
                                                    "error": abs(peer - 0.01) / 0.01}}}}
    text = random_pdes.summary([rec(0, 0.0101, 0.0099, 0.0103, 0.01, [], 0.0105),
                                rec(1, 0.013, 0.0129, 0.0131, 0.4, [], 0.012)])
    assert "confident misses: 1 of 2 (50.0%; target <= 2%: MISSED)" in text
    assert "no warning: 1 (target 0: MISSED)" in text
    assert "median error 12.50%" in text                 # DeepXDE's: 5% and 20%
    assert "the library's 15.50%" in text and "median 0.10" in text     # 1% and 30%


def test_heat_with_a_source_reaches_the_steady_state_the_source_implies():
    """u_t = D u_xx + g(x), g = a sin(k pi (x + 1) / 2): from rest, long after the slowest
    mode's decay, u = a sin(k pi (x + 1) / 2) / (D (k pi / 2)^2) at every node."""
    D, source = 0.05, np.array([0.02, -0.03])
    x, U = random_pdes._solve("heat_source", {"D": D}, np.zeros(3), 150.0, 257,
                              np.array([0.0, 150.0]), source)
    steady = sum(a * np.sin(k * np.pi * (x + 1) / 2) / (D * (k * np.pi / 2) ** 2)
                 for k, a in enumerate(source, 1))
    assert np.allclose(U[0], 0.0) and np.abs(U[1] - steady).max() < 1e-4 * np.abs(steady).max()
    drawn = [random_pdes.draw(2, i, max_points=600) for i in range(4)]
    heat = [p for p in drawn if p["family"] == "heat_source"]
    assert heat and all(p["source_modes"].shape == (2,) and p["reference_error"] < 1e-3
                        for p in heat)
