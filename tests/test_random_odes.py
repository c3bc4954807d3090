"""benchmarks/random_odes.py: the generator is the benchmark (new problems for a new seed,
the same for the same seed), its exact-ODE fit recovers a drawn problem, and its summary
scores what it says it scores."""

import importlib.util
import math
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "random_odes.py"
_spec = importlib.util.spec_from_file_location("random_odes", _PATH)
random_odes = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(random_odes)
FAMILIES = set(random_odes.FAMILIES)


def test_a_seed_draws_the_same_problems_and_another_seed_new_ones():
    a = [random_odes.draw(3, i, FAMILIES) for i in range(6)]
    b = [random_odes.draw(3, i, FAMILIES) for i in range(6)]
    c = [random_odes.draw(4, i, FAMILIES) for i in range(6)]
    assert all(x["truth"] == y["truth"] and x["y"] == y["y"] for x, y in zip(a, b))
    assert all(x["truth"] != y["truth"] for x, y in zip(a, c))
    for p in a + c:
        Y = np.asarray(p["y"])
        assert Y.shape == (len(p["observed"]), len(p["t"])) and np.isfinite(Y).all()
        assert set(p["start"]) == set(p["truth"])
        assert all(v > 0 for v in p["truth"].values())


def test_the_exact_fit_recovers_a_drawn_growth_law():
    """A drawn logistic, Gompertz or Richards problem: the benchmark's own exact-ODE fit
    ends within 20% of each coefficient, its 90% interval around its estimate."""
    for i in range(40):
        p = random_odes.draw(5, i, {"growth"})
        if p["noise"] == "gaussian":
            break
    fit, seconds = random_odes.exact_fit(p)
    for n, v in p["truth"].items():
        value, lower, upper = fit[n]
        assert abs(value - v) < 0.2 * v and lower <= value <= upper
    assert seconds > 0


def test_an_epidemic_is_counts_of_its_infected_and_its_exact_fit_is_poisson_likelihood():
    """A drawn epidemic: Poisson counts whose mean is M i; the benchmark's exact fit (Poisson
    deviance residuals) ends within 25% of beta and gamma, each interval around its
    estimate."""
    p = random_odes.draw(5, 0, {"epidemic"})
    Y = np.asarray(p["y"])
    assert p["family"] == "epidemic" and (Y == np.round(Y)).all() and (Y >= 0).all()
    fit, _ = random_odes.exact_fit(p)
    for n, v in p["truth"].items():
        value, lower, upper = fit[n]
        assert abs(value - v) < 0.25 * v and lower <= value <= upper, (n, v, fit[n])


def test_the_summary_scores_coverage_errors_and_confident_misses():
    """Two made-up records: a covered coefficient and a confident miss without a warning."""
    def rec(truth, lib, exact, warnings=()):
        return {"family": "growth", "truth": {"r": truth}, "exact": {"r": exact},
                "library": {"intervals": {"r": lib}, "warnings": list(warnings), "error": None,
                            "verdict": "agree", "seconds": 1.0}, "exact_seconds": 0.5}
    records = [rec(1.0, (1.01, 0.9, 1.1, True), (1.02, 0.9, 1.2)),
               rec(1.0, (2.0, 1.9, 2.1, True), (1.1, 0.95, 1.3))]
    out, targets = random_odes.summarise(records)
    assert out["library_coverage_90"] == 0.5 and out["exact_coverage_90"] == 1.0
    assert out["confident_misses"] == 0.5 and out["big_errors_unwarned"] == 1
    assert math.isclose(out["library_median_error"], (0.01 + 1.0) / 2)
    assert not targets["confident misses <= 2%"] and not targets["every big error warned"]
    # the same records as the state-space solver's: summarised under its own key, and the
    # records without it left out
    for r in records:
        r["statespace"] = r["library"]
    records.append(rec(1.0, (1.0, 0.9, 1.1, True), (1.0, 0.9, 1.1)))
    out2, _ = random_odes.summarise(records, "statespace")
    assert out2["problems"] == 2 and out2["confident_misses"] == 0.5
