"""The step-time benchmark's case runs (on the CPU, and on a GPU where there is one)."""

import importlib.util
from pathlib import Path

import pytest
import torch

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "step_time.py"
_spec = importlib.util.spec_from_file_location("step_time", _PATH)
step_time = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_time)


def test_benchmark_case_reports_both_steps():
    row = step_time.time_case(60, 5, repeats=1)
    assert row["N"] == 60 and row["m"] == 5
    assert row["pidkl_step_s"] > 0 and row["dkl_step_s"] > 0
    assert row["peak_rss_mib"] > 0
    assert row["device"] == "cpu" and row["pidkl_autograd_step_s"] > 0
    assert row["pidkl_plain_step_s"] > 0   # the plain Pyro step beside fit's


def test_fit_times_reports_each_library():
    pytest.importorskip("gpytorch")
    row = step_time.fit_times(N=30, m=4, num_steps=3, warmup=1)
    assert row["fit_steps"] == 3
    assert min(row["pidkl_fit_s"], row["dkl_fit_s"], row["gpytorch_fit_s"]) > 0


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device on this machine"))])
def test_benchmark_case_runs_on_the_device_without_the_autograd_route(device):
    row = step_time.time_case(60, 5, repeats=1, device=device, autograd=False)
    assert row["device"] == device and "pidkl_autograd_step_s" not in row
    assert row["pidkl_step_s"] > 0 and row["dkl_step_s"] > 0
    assert ("peak_cuda_mib" in row) == (device == "cuda")


@pytest.mark.slow
def test_speed_alternatives_fused_adam_reports_the_difference():
    import sys
    sys.path.insert(0, str(_PATH.parent))
    try:
        spec = importlib.util.spec_from_file_location("speed_alternatives",
                                                      _PATH.parent / "speed_alternatives.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        row = module.fused_adam()
    finally:
        sys.path.remove(str(_PATH.parent))
    assert row["case"] == "fused-adam" and row["max_loss_rel_diff"] < 1e-8
    assert row["adam_step_ms_foreach"] > 0 and row["adam_step_ms_fused"] > 0
    assert isinstance(row["params_apart"], dict)


def _load(name):
    import sys
    sys.path.insert(0, str(_PATH.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, _PATH.parent / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(_PATH.parent))
    return module


def test_the_verification_suite_records_a_solver_and_an_extrapolation_fit():
    verification = _load("verification")
    rec = verification.run_one((15, "solver", "pcgp", 50, None, None))
    assert "error" not in rec and rec["kind"] == "ode1" and rec["threads"] == 1
    assert rec["rel_l2"] < 1e-4 and rec["linear_detected"] == rec["linear"] is False
    rec = verification.run_one((15, "extrapolation", "skl", None, None, None))
    assert "error" not in rec and rec["pure"] and rec["rmse_far"] > 0
    # further model options reach the conditioned GP and are recorded
    options = verification.model_options("learn_residual_noise=True,residual_noise=1e-4")
    assert options == {"learn_residual_noise": True, "residual_noise": 1e-4}
    rec = verification.run_one((15, "solver", "pcgp", 50, None, {"residual_noise": 1e-2}))
    assert "error" not in rec and rec["model_options"] == {"residual_noise": 1e-2}
    assert rec["rel_l2"] > 1e-3       # the equation held loosely: a worse solve
    with pytest.raises(ValueError, match="name=value"):
        verification.model_options("learn_residual_noise")


def test_the_solver_benchmark_uses_the_peers_points_and_an_exact_burgers_solution():
    import numpy as np
    solver_speed = _load("solver_speed")
    interior, boundary = solver_speed.peer_grid(0.05)
    assert interior.shape == (361, 2) and boundary.shape == (80, 2)
    x = np.linspace(-1, 1, 41)
    u0 = solver_speed.burgers_truth(x, np.zeros_like(x))
    assert np.allclose(u0, -np.sin(np.pi * x))
    u = solver_speed.burgers_truth(x, np.full_like(x, 0.5))
    assert np.allclose(u, -u[::-1], atol=1e-12) and abs(u[0]) < 1e-12   # odd, u(-1) = 0
    # one step of the equation by finite differences: u_t + u u_x - 0.02 u_xx ~ 0
    h, t = 1e-3, 0.3
    xs = np.linspace(-0.9, 0.9, 7)
    f = lambda x, t: solver_speed.burgers_truth(x, np.full_like(x, t))   # noqa: E731
    ut = (f(xs, t + h) - f(xs, t - h)) / (2 * h)
    ux = (f(xs + h, t) - f(xs - h, t)) / (2 * h)
    uxx = (f(xs + h, t) - 2 * f(xs, t) + f(xs - h, t)) / h ** 2
    assert np.abs(ut + f(xs, t) * ux - 0.02 * uxx).max() < 1e-3


def test_the_sparse_cholesky_measurement_is_of_a_correct_factor():
    """The factor the screening benchmark measures: its covariances of derivative
    measurements match the library's operator covariances, its maximin order matches the
    brute-force one, and with every earlier measurement in each conditioning set it is the
    exact inverse Cholesky factor (Theta x and log det to rounding); with a finite radius
    its KL divergence falls as the radius grows."""
    import numpy as np
    from pyro.contrib.gp.kernels import RBF
    from pyro_pidkl.kernels.operators import OperatorCovariance
    sc = _load("sparse_cholesky_se")
    D = torch.float64
    g = torch.Generator().manual_seed(0)
    k = RBF(2, variance=torch.tensor(1.3, dtype=D), lengthscale=torch.tensor([0.3, 0.5], dtype=D))
    A, B = torch.rand(7, 2, dtype=D, generator=g), torch.rand(5, 2, dtype=D, generator=g)
    idx = [(), (0,), (0, 0), (1, 1), (0, 1)]
    wA = {i: torch.randn(7, dtype=D, generator=g) for i in idx}
    wB = {i: torch.randn(5, dtype=D, generator=g) for i in idx}
    with torch.no_grad():
        ref = OperatorCovariance(k, A, B)(wA, wB)
        got = sc.measurement_covariance(A, torch.stack([wA[i] for i in idx], 1), B,
                                        torch.stack([wB[i] for i in idx], 1), idx,
                                        k.lengthscale, k.variance)
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-12)
    x = np.random.default_rng(0).random((200, 2))
    order, lengths = sc.maximin_order(x)
    dist = np.sqrt(((x - x[order[0]]) ** 2).sum(1))
    for s in range(1, 200):
        assert dist.max() == pytest.approx(lengths[s], abs=1e-12)
        dist = np.minimum(dist, np.sqrt(((x - x[order[s]]) ** 2).sum(1)))
    pts, point_of, W, ind = sc.elliptic_measurements(7)
    ell = torch.tensor([0.3, 0.3], dtype=D)
    Pm, Wt = pts[point_of], torch.as_tensor(W)
    theta = (sc.measurement_covariance(Pm, Wt, Pm, Wt, ind, ell, 1.0)
             + 1e-2 * torch.eye(len(point_of), dtype=D)).numpy()
    v = np.random.default_rng(1).standard_normal(len(point_of))
    exact = sc.se_factor(pts, point_of, W, ind, ell, 1.0, 1e-2, 1e9)
    assert np.allclose(exact.covariance_matvec(v), theta @ v, rtol=1e-9, atol=1e-9)
    assert exact.logdet() == pytest.approx(np.linalg.slogdet(theta)[1], rel=1e-10)
    kl = [sc.measure(7, 0.3, rho, nugget=1e-2)["kl_nats"] for rho in (1.5, 3.0)]
    assert kl[1] < kl[0]
    # as a preconditioner, the exact factor solves in one or two CG steps; the diagonal in many
    exact_pcg, diag_pcg = sc.pcg(7, 0.3, 1e9), sc.pcg(7, 0.3, None)
    assert exact_pcg["converged"] and exact_pcg["iterations"] <= 2
    assert exact_pcg["rel_residual"] < 1e-7 and diag_pcg["iterations"] > 10


def test_the_boundary_benchmark_measures_with_and_without_conditions():
    b = _load("boundaries")
    with_c, without = b.heat_neumann(100), b.heat_neumann(100, with_conditions=False)
    assert with_c["rel_l2"] < 1e-3 < without["rel_l2"]
    rec = b.data_case("heat_neumann_data", "pcgp", 0)
    assert rec["rmse"] < 0.05 and 0 <= rec["coverage95"] <= 1
    assert {k for k, _ in [(m["case"], 0) for m, _ in b.jobs()]} >= {"poisson_L", "kdv", "beam"}


@pytest.mark.slow
def test_the_inference_benchmark_scores_every_method_on_one_fit():
    inf = _load("inference")
    recs = inf.run_one(("oscillator", 0, 10, 10, 10, None))
    assert [r["method"] for r in recs] == list(inf.METHODS)
    for r in recs:
        assert "error" not in r, r
        assert set(r["params"]) == {"omega", "zeta"} and 0 <= r["coverage95"] <= 1
    assert recs[0]["params"]["omega"] == pytest.approx(2.0, abs=0.05)     # the fit's MAP


def test_the_calibration_benchmark_ranks_the_truth_beside_the_exact_likelihood(tmp_path):
    """One dataset of the decay family: a rank in (0, 1) for the coefficient, the exact
    likelihood's rank beside it (the same data, the ODE solved in the likelihood: the two
    agree closely on this well-specified problem), coverage of f beyond the data; and the
    summary prints the targets with a chi-square test of the ranks."""
    import json
    cal = _load("calibration")
    rec = cal.run_one(("decay", 0, "test"))
    assert "error" not in rec, rec.get("traceback")
    k = rec["coefficients"]["k"]
    assert 0 < k["rank"] < 1 and 0 < k["reference"]["rank"] < 1
    assert abs(k["rank"] - k["reference"]["rank"]) < 0.1
    assert set(rec["f_coverage"]) == {"0.5", "0.9", "0.95"} and rec["width_over_error"] > 0
    path = tmp_path / "cal.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    text = cal.summary(str(path), figure=str(tmp_path / "ranks.png"))
    assert "decay k: 90% intervals cover" in text and (tmp_path / "ranks.png").exists()
    p, counts = cal._chi2([0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.95])
    assert p > 0.99 and list(counts) == [1] * 10
    assert cal._chi2([0.01] * 10)[0] < 1e-6


@pytest.mark.slow   # with the exact-ODE referee after each fit: over ten seconds
def test_the_adequacy_benchmark_records_a_right_and_a_wrong_equation(tmp_path):
    import json
    ad = _load("adequacy")
    right = dict(ad.run_case("decay", 0), case="decay", seed=0)
    wrong = dict(ad.run_case("logistic~decay", 0), case="logistic~decay", seed=0)
    assert "error" not in right and "error" not in wrong
    assert right["right"] and not right["warned"] and not wrong["right"] and wrong["warned"]
    path = tmp_path / "ad.jsonl"
    path.write_text(json.dumps(right) + "\n" + json.dumps(wrong) + "\n")
    text = ad.summary(str(path))
    assert "a wrong equation warns: 1/1" in text and "a right equation warns: 0/1" in text


def test_the_systems_benchmark_sets_the_interval_beside_the_exact_odes_posterior(monkeypatch):
    """The peer's table: does the conditioned GP's 95% interval hold NumPyro's posterior mean,
    and how wide is it against the posterior's interval; without a peer interpreter the
    peer is left out with its reason."""
    sy = _load("systems")
    ours = {"problem": "lotka_volterra", "method": "system", "seed": 0, "seconds": 10.0,
            "outputs": {}, "coefficients": {"alpha": {"value": 1.0, "lower": 0.9,
                                                      "upper": 1.2}}}
    peer = {"problem": "lotka_volterra", "method": "numpyro", "seed": 0, "seconds": 40.0,
            "peer_seconds": 38.0, "outputs": {},
            "coefficients": {"alpha": {"mean": 1.05, "lower": 0.95, "upper": 1.15,
                                       "r_hat": 1.002}}}
    text = sy.against_the_exact_posterior([ours, peer])
    assert "| lotka_volterra | alpha | 1.05 | 1/1 | 1.50 | 1.002 | 10, 38 |" in text
    peer["coefficients"]["alpha"]["mean"] = 1.3
    assert "| 0/1 |" in sy.against_the_exact_posterior([ours, peer])
    monkeypatch.delenv("PIDKL_PEER_PYTHON", raising=False)
    from pyro_pidkl.datasets import system_problem
    assert "PIDKL_PEER_PYTHON" in sy.run_peer(system_problem("lotka_volterra", 0), 0)["refused"]


def test_the_lorenz_benchmark_scores_a_trajectory_and_the_exact_fit_recovers_exact_data(
        tmp_path):
    """benchmarks/lorenz.py: the true trajectory has error 0 and a shifted one its shift over
    the spread; on data taken exactly from the true trajectory (DeepXDE's file format), the
    exact ODE's least squares from (1, 1, 1) finds the coefficients."""
    import numpy as np
    lorenz = _load("lorenz")
    truth = lorenz.true_trajectory()
    assert lorenz.trajectory_error(truth)[0] == 0.0
    shifted = truth + truth.std(0)                   # one spread off in every component
    assert abs(lorenz.trajectory_error(shifted)[0] - 1.0) < 1e-12
    t = np.linspace(0.0, 3.0, 301)[::12][:, None]    # 26 of the grid's times
    np.savez(tmp_path / "Lorenz.npz", t=t, y=truth[::12])
    out = lorenz.run_least_squares(str(tmp_path / "Lorenz.npz"))
    for k, v in out["coefficients"].items():
        assert v["rel_error"] < 1e-5, (k, v)
    assert out["trajectory_error"] < 1e-5


def test_the_systems_benchmark_prints_each_target_with_its_number():
    """The targets block: a rate's median error and coverage (free intervals counted), an
    unobserved component's coverage and a small system's seconds beside the peer's, each
    marked missed where it is."""
    sy = _load("systems")

    def rec(method, seed, value, covered, identified=True, seconds=30.0):
        return {"problem": "sir", "method": method, "seed": seed, "seconds": seconds,
                "outputs": {"s": {"observed": False, "coverage95": 0.8, "rmse": 0.1,
                                  "rmse_over_range": 0.1}},
                "coefficients": {"beta": {"value": value, "truth": 0.5,
                                          "rel_error": abs(value - 0.5) / 0.5,
                                          "covered95": covered, "identified": identified}}}
    recs = [rec("system", 0, 0.52, True), rec("system", 1, 0.47, True, identified=False),
            rec("system", 2, 0.6, False), rec("numpyro", 0, 0.5, True, seconds=90.0)]
    text = sy.targets(recs)
    assert "sir: beta 6.0% 2/3 (1 free) (missed)" in text
    assert "unobserved sir s: median 95% coverage 0.80 (target >= 0.85, missed)" in text
    assert "sir: system 30 s, numpyro 90 s (missed)" in text


def test_the_solver_benchmark_states_each_target_against_the_peer(tmp_path):
    """Met only when no slower and no less accurate than the peer in the same run; the
    latest run of each size and machine state counts."""
    import json
    solver_speed = _load("solver_speed")
    base = {"solver": "sparse", "case": "elliptic", "points": 10201, "peer_s": 40.0,
            "peer_rms": 5e-6, "commit": "x"}
    rows = [dict(base, seconds=80.0, rms=1e-7, time_ratio=2.0),              # superseded
            dict(base, seconds=17.0, rms=3e-7, time_ratio=0.42),
            dict(base, seconds=30.0, rms=9e-6, time_ratio=0.75, busy=True),
            dict(base, points=2601, seconds=1.0, rms=1e-7, time_ratio=0.1)]    # too small
    path = tmp_path / "speed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = solver_speed.targets(str(path)).splitlines()
    assert len(lines) == 3
    assert "10201 points, quiet: 17.0 s against 40.0 s" in lines[1] and "met" in lines[1]
    assert "other core busy" in lines[2] and lines[2].split(": ")[-1].startswith("missed")


def test_the_solver_benchmark_states_the_data_fit_targets(tmp_path):
    """N = 10^4: the median time against 60 s, and alpha's median error against the dense
    fit's at N = 3000, from the latest commit's runs only."""
    import json
    solver_speed = _load("solver_speed")

    def rec(N, likelihood, seed, seconds, err, commit="new"):
        return {"case": "data", "N": N, "data_likelihood": likelihood, "seed": seed,
                "seconds": seconds, "alpha_rel_error": err, "threads": 2, "commit": commit}
    rows = [rec(10_000, "inducing", 0, 500.0, 0.5, commit="old"),             # superseded
            rec(10_000, "inducing", 0, 40.0, 0.002), rec(10_000, "inducing", 1, 70.0, 0.004),
            rec(10_000, "inducing", 2, 50.0, 0.001), rec(3000, "exact", 0, 80.0, 0.003),
            rec(3000, "exact", 1, 80.0, 0.001), rec(3000, "exact", 2, 80.0, 0.0015)]
    path = tmp_path / "speed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = solver_speed.targets(str(path)).splitlines()
    assert lines[1] == "Targets (data fit, commit new, medians over seeds):"
    assert "50.0 s (range 40.0-70.0, 3 seeds, 2 threads): met" in lines[2]
    assert "0.20% against 0.15%: missed" in lines[3]
