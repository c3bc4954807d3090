"""Simulation-based calibration of the conditioned GP's intervals (Cook, Gelman & Rubin 2006;
Talts, Betancourt, Simpson, Vehtari & Gelman 2018).

For each equation family: draw the coefficients from a stated prior (and the initial state
or the solution's modes from theirs), simulate the solution exactly (closed form or scipy's
``solve_ivp`` at tolerance 1e-10), observe it with Gaussian noise on the first part of the
domain, and fit ``PhysicsConditionedGP`` (or ``ConditionedSystemGP``) with the prior declared
on each coefficient (``Parameter(start, prior=...)``: a MAP estimate, its Laplace
approximation the posterior) and every other option at its default. Per dataset:

* each coefficient's **rank**: the posterior CDF at the truth, :math:`u = \\Phi((\\theta -
  \\hat\\theta) / s)` in the coefficient's unconstrained space (the Laplace posterior is
  Gaussian there); uniform over datasets exactly when the intervals are calibrated (a U
  shape: too narrow; a hump: too wide; a slope: biased); 50/90/95% central intervals and
  whether each covers the truth;
* the solution beyond the data: coverage of the exact values by the 50/90/95% bands and
  the mean 95% half-width over the RMSE (sharpness: a band can cover because it is wide);
* where the solution can be computed for any coefficients (the ODE families by
  ``solve_ivp``, heat in closed form), the same ranks under the *exact* likelihood with the
  same priors (:func:`exact_reference`, Laplace's approximation of it): how far the
  library's intervals are from the ones the exact model gives on the same data, and what
  part of any miscalibration belongs to Laplace's Gaussian approximation itself.

What the data simulate is the equation with its coefficients drawn from the prior the fit
is told; the GP prior on the solution is the model's, not the simulator's, so a perfect
method would still not be exactly calibrated for ``f``: the coefficients' ranks are the
strict test.

    python benchmarks/calibration.py --jobs 2          # records in docs/results/calibration.jsonl
    python benchmarks/calibration.py --summary         # the table, targets and rank figure
"""

import argparse
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "docs", "results", "calibration.jsonl")
FIGURE = os.path.join(HERE, "..", "docs", "calibration_ranks.png")
LEVELS = (0.5, 0.9, 0.95)
BINS = 10


# -- the families --------------------------------------------------------------------------

class Family:
    """An equation family: ``priors`` ``{name: (kind, a, b)}`` (``lognormal`` mu, sigma;
    ``beta`` a, b), ``draw(gen)`` -> ``(truth, data, test)``, ``build(data)`` -> model, and
    for the exact-likelihood reference ``forward = (predict, extras)``: ``predict(coefficients,
    extras, data)`` the exact solution at the data's inputs (a list per output) with the
    nuisance values ``extras`` (initial states, modes; ``extras(data)`` their start)."""

    def __init__(self, name, kind, priors, simulate, build, forward=None):
        self.name, self.kind, self.priors = name, kind, priors
        self.simulate, self.build, self.forward = simulate, build, forward

    def draw(self, seed):
        gen = np.random.default_rng(10_000 + seed)
        truth = {}
        for n, (kind, a, b) in self.priors.items():
            truth[n] = float(np.exp(gen.normal(a, b)) if kind == "lognormal" else gen.beta(a, b))
        return truth, self.simulate(truth, gen)


def _prior(kind, a, b):
    import pyro.distributions as dist
    import torch
    a, b = torch.tensor(float(a)), torch.tensor(float(b))
    return dist.LogNormal(a, b) if kind == "lognormal" else dist.Beta(a, b)


def _parameters(priors):
    """Each coefficient started at its prior's median, the prior declared."""
    from torch.distributions import constraints
    from pyro_pidkl.physics import Parameter
    out = {}
    for n, (kind, a, b) in priors.items():
        if kind == "lognormal":
            out[n] = Parameter(math.exp(a), prior=_prior(kind, a, b))
        else:
            out[n] = Parameter(a / (a + b), constraints.unit_interval, prior=_prior(kind, a, b))
    return out


def _solve(rhs, y0, t, column=0):
    from scipy.integrate import solve_ivp
    sol = solve_ivp(rhs, (0.0, float(t[-1])), y0, t_eval=t, rtol=1e-10, atol=1e-12,
                    method="LSODA")
    return sol.y[column] if column is not None else sol.y


def _ode_family(name, priors, rhs, y0, t_data, t_test, sd, equation, domain):
    """A scalar ODE observed on ``t_data`` with noise ``sd`` (relative to the solution's
    spread there), predicted on ``t_test``."""
    def simulate(truth, gen):
        x0 = y0(gen)
        t = np.r_[t_data, t_test]
        f = _solve(lambda _, s: rhs(s, truth), x0, t)
        n = len(t_data)
        y = f[:n] + sd * np.std(f[:n]) * gen.standard_normal(n)
        return {"X": t_data[:, None], "y": y, "X_test": t_test[:, None], "f_test": f[n:]}

    def build(data):
        import torch
        import pyro_pidkl as pk
        from pyro_pidkl.physics import Equation
        eq = Equation(equation, inputs=("t",), **_parameters(priors))
        return pk.PhysicsConditionedGP(torch.as_tensor(data["X"]), torch.as_tensor(data["y"]),
                                       eq, domain=pk.Box(t=domain))

    def predict(coefficients, extras, data):
        return [_solve(lambda _, s: rhs(s, coefficients), list(extras), data["X"][:, 0])]

    def extras(data):                       # the state at t = 0, from the data
        y, t = data["y"], data["X"][:, 0]
        slope = (y[1] - y[0]) / (t[1] - t[0])
        return [y[0], slope][:len(y0(np.random.default_rng(0)))]
    return Family(name, "scalar", priors, simulate, build, (predict, extras))


def decay(f, x, k):
    return f.d("t") + k * f


def logistic(f, x, r, K):
    return f.d("t") - r * f * (1 - f / K)


def oscillator(f, x, omega, zeta):
    return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f


def pendulum(f, x, c, w2):
    import torch
    return f.d("t", "t") + c * f.d("t") + w2 * torch.sin(f)


def heat(f, x, k):
    return f.d("t") - k * f.d("x", "x")


def helmholtz(f, x, kappa):
    return f.d("x", "x") + f.d("y", "y") + kappa * f


def chain(f, x, k1, k2):
    a, b = f["a"], f["b"]
    return (a.d("t") + k1 * a, b.d("t") - k1 * a + k2 * b)


def _pde_family(name, priors, equation, inputs, solution, modes, data_box, test_box):
    """A PDE in two inputs with a closed-form solution ``solution(truth, modes, X)`` whose
    ``modes`` are drawn by ``modes(gen)``: 60 noisy values uniform on ``data_box``, the
    exact solution at 200 points uniform on ``test_box`` (boxes ``((lo, hi), (lo, hi))``),
    the equation holding on the unit square."""
    def uniform(gen, box, n):
        return np.c_[gen.uniform(*box[0], n), gen.uniform(*box[1], n)]

    def simulate(truth, gen):
        m = modes(gen)
        X, T = uniform(gen, data_box, 60), uniform(gen, test_box, 200)
        f = solution(truth, m, X)
        return {"X": X, "y": f + 0.02 * np.std(f) * gen.standard_normal(60), "X_test": T,
                "f_test": solution(truth, m, T)}

    def build(data):
        import torch
        import pyro_pidkl as pk
        from pyro_pidkl.physics import Equation
        eq = Equation(equation, inputs=inputs, **_parameters(priors))
        return pk.PhysicsConditionedGP(torch.as_tensor(data["X"]), torch.as_tensor(data["y"]),
                                       eq, input_names=inputs,
                                       domain=pk.Box(**{n: (0.0, 1.0) for n in inputs}))
    return Family(name, "scalar", priors, simulate, build)


def _heat_solution(truth, a, X):
    """Three sine modes decaying at their own rates: exact for f_t = k f_xx."""
    x, t = X[:, 0], X[:, 1]
    return sum(a[n - 1] * np.exp(-truth["k"] * (n * math.pi) ** 2 * t) * np.sin(n * math.pi * x)
               for n in (1, 2, 3))


def _helmholtz_solution(truth, modes, X):
    """Three plane waves of wavenumber sqrt(kappa): exact for lap f + kappa f = 0."""
    theta, phase, c = modes
    w = math.sqrt(truth["kappa"])
    return sum(cj * np.cos(w * (math.cos(th) * X[:, 0] + math.sin(th) * X[:, 1]) + ph)
               for cj, th, ph in zip(c, theta, phase))


def _heat_family():
    family = _pde_family("heat", {"k": ("lognormal", math.log(0.05), 0.3)}, heat, ("x", "t"),
                         _heat_solution,
                         lambda g: g.normal(0.0, 1.0, 3) / np.array([1.0, 2.0, 3.0]),
                         ((0, 1), (0, 0.4)), ((0, 1), (0.4, 1.0)))
    family.forward = (lambda c, a, data: [_heat_solution(c, a, data["X"])],
                      lambda data: [0.0, 0.0, 0.0])
    return family


def _helmholtz_family():
    return _pde_family("helmholtz", {"kappa": ("lognormal", math.log(30.0), 0.2)}, helmholtz,
                       ("x", "y"), _helmholtz_solution,
                       lambda g: (g.uniform(0, 2 * math.pi, 3), g.uniform(0, 2 * math.pi, 3),
                                  g.normal(0.0, 1.0, 3)),
                       ((0, 0.4), (0, 1)), ((0.4, 1.0), (0, 1)))


def _chain_family():
    priors = {"k1": ("lognormal", math.log(0.8), 0.3), "k2": ("lognormal", math.log(0.3), 0.3)}
    t_data, t_test = np.linspace(0, 4, 20), np.linspace(4.1, 8, 30)

    def simulate(truth, gen):
        a0 = gen.uniform(0.5, 1.5)
        t = np.r_[t_data, t_test]
        s = _solve(lambda _, s: [-truth["k1"] * s[0], truth["k1"] * s[0] - truth["k2"] * s[1]],
                   [a0, 0.0], t, column=None)
        n = len(t_data)
        ys = [s[c, :n] + 0.03 * np.std(s[c, :n]) * gen.standard_normal(n) for c in (0, 1)]
        return {"X": t_data, "y": ys, "X_test": t_test[:, None], "f_test": s[:, n:].T}

    def build(data):
        import torch
        import pyro_pidkl as pk
        system = pk.EquationSystem(chain, outputs=("a", "b"), inputs=("t",),
                                   **_parameters(priors))
        t = torch.as_tensor(data["X"])
        return pk.ConditionedSystemGP(system, {o: (t, torch.as_tensor(y))
                                               for o, y in zip(("a", "b"), data["y"])},
                                      domain=pk.Box(t=(0.0, 8.0)))

    def predict(c, extras, data):
        s = _solve(lambda _, s: [-c["k1"] * s[0], c["k1"] * s[0] - c["k2"] * s[1]],
                   [extras[0], 0.0], data["X"], column=None)
        return [s[0], s[1]]
    return Family("chain", "system", priors, simulate, build,
                  (predict, lambda data: [data["y"][0][0]]))


def families():
    lin = np.linspace
    out = [
        _ode_family("decay", {"k": ("lognormal", 0.0, 0.4)},
                    lambda s, p: [-p["k"] * s[0]], lambda g: [g.uniform(0.5, 1.5)],
                    lin(0, 1, 20), lin(1.05, 3, 30), 0.02, decay, (0.0, 3.0)),
        _ode_family("logistic", {"r": ("lognormal", 0.0, 0.3),
                                 "K": ("lognormal", math.log(2.0), 0.2)},
                    lambda s, p: [p["r"] * s[0] * (1 - s[0] / p["K"])],
                    lambda g: [g.uniform(0.1, 0.3)], lin(0, 5, 25), lin(5.2, 10, 30), 0.03,
                    logistic, (0.0, 10.0)),
        _ode_family("oscillator", {"omega": ("lognormal", math.log(2.0), 0.2),
                                   "zeta": ("beta", 2.0, 12.0)},
                    lambda s, p: [s[1], -p["omega"] ** 2 * s[0]
                                  - 2 * p["zeta"] * p["omega"] * s[1]],
                    lambda g: [g.uniform(0.5, 1.5), g.normal(0.0, 1.0)],
                    lin(0, 2.4, 40), lin(2.5, 6, 40), 0.05, oscillator, (0.0, 6.0)),
        _ode_family("pendulum", {"c": ("lognormal", math.log(0.3), 0.3),
                                 "w2": ("lognormal", math.log(4.0), 0.2)},
                    lambda s, p: [s[1], -p["c"] * s[1] - p["w2"] * math.sin(s[0])],
                    lambda g: [g.uniform(1.0, 2.5), 0.0],
                    lin(0, 3, 40), lin(3.1, 6, 40), 0.03, pendulum, (0.0, 6.0)),
        _heat_family(),
        _helmholtz_family(),
        _chain_family(),
    ]
    return {f.name: f for f in out}


# -- the exact-likelihood reference --------------------------------------------------------

def _to_u(kind, v):
    return math.log(v) if kind == "lognormal" else math.log(v / (1 - v))


def _from_u(kind, u):
    return math.exp(u) if kind == "lognormal" else 1 / (1 + math.exp(-u))


def exact_reference(family, truth, data, start):
    r"""The posterior of the coefficients under the *exact* likelihood (the solution itself,
    by ``solve_ivp`` or in closed form, with each output's Gaussian noise at its maximum
    likelihood) and the same priors, in Laplace's approximation on the same unconstrained
    scale: the mode by least squares from ``start`` (the library's estimate), the precision
    :math:`J^\top J` of the standardised residuals and of the priors written as residuals
    (nuisance values included, then marginalised). ``{name: {"estimate", "rank"}}``, or
    ``None`` for a family without a closed or integrable solution."""
    import scipy.optimize
    from scipy import stats
    if family.forward is None:
        return None
    predict, extras = family.forward
    names = list(family.priors)
    kinds = [family.priors[n][0] for n in names]
    ys = data["y"] if isinstance(data["y"], list) else [data["y"]]
    p0 = np.r_[[_to_u(k, start[n]) for k, n in zip(kinds, names)], extras(data)]
    sig = np.ones(len(ys))

    def prior_rows(p):
        """Each prior as a residual: ``(u - a) / b`` for a LogNormal (exact), and for a
        Beta on the logit scale ``sign(u - u*) sqrt(2 (nlp(u) - nlp(u*)))`` (its negative
        log density as a square, ``u*`` its mode)."""
        rows = []
        for (kind, a, b), u in zip((family.priors[n] for n in names), p):
            if kind == "lognormal":
                rows.append((u - a) / b)
            else:
                v, vs = _from_u(kind, u), a / (a + b)
                nlp = -(a * math.log(v) + b * math.log(1 - v))
                low = -(a * math.log(vs) + b * math.log(1 - vs))
                rows.append(math.copysign(math.sqrt(max(2 * (nlp - low), 0.0)),
                                          u - _to_u(kind, vs)))
        return np.array(rows)

    def residuals(p, with_prior=True):
        c = {n: _from_u(k, u) for n, k, u in zip(names, kinds, p)}
        try:
            pred = predict(c, p[len(names):], data)
            parts = [(np.asarray(f) - y) / s for f, y, s in zip(pred, ys, sig)]
            if with_prior:
                parts.append(prior_rows(p))
            r = np.concatenate(parts)
        except (ValueError, ArithmeticError, RuntimeError):
            r = np.array([np.nan])
        size = sum(len(y) for y in ys) + (len(names) if with_prior else 0)
        return r if r.size == size and np.isfinite(r).all() else np.full(size, 1e6)

    fit = scipy.optimize.least_squares(lambda p: residuals(p, False), p0)
    n = [len(y) for y in ys]
    r, k = fit.fun, 0
    for j, m in enumerate(n):                      # each output's noise, by its residuals
        sig[j] = max(math.sqrt(np.sum(r[k:k + m] ** 2) / max(m - 1, 1)), 1e-12)
        k += m
    mode = scipy.optimize.least_squares(residuals, fit.x)   # the posterior mode
    p = mode.x
    J = mode.jac
    H = J.T @ J
    cov = np.linalg.inv(H)
    # the textbook verdict by the library's rule (pyro_pidkl.infer.laplace): identified where
    # the data alone (no declared prior, the initial state integrated out as the GP integrates
    # out its solution, a vague normal prior of sd IDENTIFIED_PRIOR_SD on each coefficient's
    # unconstrained scale) narrow the coefficient to IDENTIFIED_SHRINK of that prior's sd
    from pyro_pidkl.infer.laplace import IDENTIFIED_PRIOR_SD, IDENTIFIED_SHRINK
    Jd = J[:-len(names)]
    vague = np.r_[np.full(len(names), IDENTIFIED_PRIOR_SD ** -2.0),
                  np.full(Jd.shape[1] - len(names), 1e-8)]
    plain = np.linalg.inv(Jd.T @ Jd + np.diag(vague))
    out = {}
    for i, (name, kind) in enumerate(zip(names, kinds)):
        sd = math.sqrt(max(cov[i, i], 1e-300))
        out[name] = {"estimate": _from_u(kind, p[i]),
                     "rank": float(stats.norm.cdf((_to_u(kind, truth[name]) - p[i]) / sd)),
                     "identified": bool(plain[i, i] < (IDENTIFIED_SHRINK
                                                       * IDENTIFIED_PRIOR_SD) ** 2)}
    return out


# -- one dataset ---------------------------------------------------------------------------

def run_one(job):
    """Fit dataset ``seed`` of family ``name``: its record (an error is recorded); with a
    fourth entry ``(warmup, draws)`` NUTS runs too, from the fit."""
    name, seed, commit = job[:3]
    nuts = job[3] if len(job) > 3 else None
    import torch
    torch.set_num_threads(1)
    os.environ["PIDKL_THREADS"] = "1"
    rec = {"family": name, "seed": seed, "commit": commit, "threads": 1}
    try:
        rec.update(_fit(families()[name], seed, nuts))
    except Exception as e:  # recorded, never dropped
        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rec["traceback"] = traceback.format_exc(limit=4)
    return rec


def _nuts(model, truth, names, nuts):
    """NUTS from the fit (one chain of ``nuts = (warmup, draws)``): per coefficient the rank
    of the truth among the draws and whether the central intervals cover it."""
    import pyro_pidkl as pk
    t0 = time.perf_counter()
    draws = pk.infer.sample_coefficients(model, num_warmup=nuts[0], num_samples=nuts[1],
                                   num_chains=1, progress=False)
    out = {"seconds": round(time.perf_counter() - t0, 2), "coefficients": {}}
    summary = draws.summary(0.9)
    for n in names:
        x = draws.samples[n].double()
        out["coefficients"][n] = {
            "rank": float((x < truth[n]).double().mean()),
            "covers": {str(p): bool(float(x.quantile(0.5 - p / 2)) <= truth[n]
                                    <= float(x.quantile(0.5 + p / 2))) for p in LEVELS},
            "n_eff": summary[n]["n_eff"], "divergences": sum(
                len(v) for v in draws.diagnostics.get("divergences", {}).values())}
    return out


def _fit(family, seed, nuts=None):
    import torch
    from scipy import stats
    import pyro_pidkl as pk
    truth, data = family.draw(seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = family.build(data)
        result = pk.fit(model, progress=False, seed=seed)
        intervals = {p: model.coefficient_intervals(p) for p in LEVELS}
        names, sizes, _, cov = model.laplace(True)
        mean, var = model(torch.as_tensor(data["X_test"]))
    seconds = time.perf_counter() - t0
    _, theta, _ = model._laplace_parameters(False)
    coefficients = {}
    for k, n in enumerate(names):
        spec = model.coefficient_spec(n)
        to = torch.distributions.transform_to(spec.constraint)
        u_true = float(to.inv(torch.tensor(truth[n], dtype=torch.float64)))
        u_hat, s = float(theta[k].detach()), float(cov[k, k].clamp(min=0).sqrt())
        coefficients[n] = {
            "truth": truth[n], "estimate": intervals[0.9][n]["value"],
            "rank": (float(stats.norm.cdf((u_true - u_hat) / s)) if 0 < s < math.inf
                     else None),
            "identified": bool(intervals[0.9][n]["identified"]),
            "covers": {str(p): bool(intervals[p][n]["lower"] <= truth[n]
                                    <= intervals[p][n]["upper"]) for p in LEVELS}}
    try:
        reference = exact_reference(family, truth, data,
                                    {n: v["estimate"] for n, v in coefficients.items()})
    except (ValueError, np.linalg.LinAlgError):
        reference = None
    if reference is not None:
        for n, ref in reference.items():
            coefficients[n]["reference"] = ref
    f = torch.as_tensor(np.asarray(data["f_test"]), dtype=mean.dtype).reshape(mean.shape)
    sd = var.clamp(min=0).sqrt()
    err = (mean - f).abs()
    f_cov = {}
    for p in LEVELS:
        z = float(stats.norm.ppf(0.5 + p / 2))
        f_cov[str(p)] = float((err <= z * sd).double().mean())
    rmse = float((mean - f).pow(2).mean().sqrt())
    half = float(1.959964 * sd.mean())
    extra = {}
    if nuts is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            extra["nuts"] = _nuts(model, truth, names, nuts)
    return {**extra, "truth": truth, "coefficients": coefficients, "f_coverage": f_cov,
            "rmse": rmse, "half_width95": half, "width_over_error": half / max(rmse, 1e-300),
            "adequate": bool(result.adequacy.ok) if result.adequacy is not None else None,
            "seconds": round(seconds, 2),
            "warnings": sorted({f"{w.category.__name__}: {str(w.message)[:100]}"
                                for w in caught})}


# -- running and summarising ---------------------------------------------------------------

def run(args):
    names = args.families.split(",") if args.families else list(families())
    done = {(r["family"], r["seed"]) for r in records.read_records(args.out) if "error" not in r}
    commit = records.commit()
    nuts = tuple(int(v) for v in args.nuts.split("+")) if args.nuts else None
    todo = [(n, s, commit) + ((nuts,) if nuts else ()) for s in records.seeds(args.seeds)
            for n in names if (n, s) not in done]
    print(f"{len(todo)} fits to run ({len(done)} recorded) -> {args.out}", flush=True)
    ctx = mp.get_context("spawn")
    with open(args.out, "a") as fh, ctx.Pool(args.jobs) as pool:
        for i, rec in enumerate(pool.imap_unordered(run_one, todo), 1):
            records.append(fh, rec)
            msg = rec.get("error") or _line(rec)
            print(f"[{i}/{len(todo)}] {rec['family']} {rec['seed']}: {msg}", flush=True)


def _line(rec):
    ranks = ", ".join(f"{k} {v['rank']:.2f}" if v["rank"] is not None else f"{k} free"
                      for k, v in rec["coefficients"].items())
    return (f"ranks {ranks}; f cov95 {rec['f_coverage']['0.95']:.2f}, width/err "
            f"{rec['width_over_error']:.1f}, {rec['seconds']:.1f}s")


def _chi2(ranks):
    """The chi-square test of uniformity of ``ranks`` in :data:`BINS` equal bins: p-value."""
    from scipy import stats
    counts = np.histogram(ranks, bins=BINS, range=(0.0, 1.0))[0]
    return float(stats.chisquare(counts).pvalue), counts


def summary(path, figure=None):
    recs = records.latest(records.read_records(path), lambda r: (r["family"], r["seed"]))
    recs = [r for r in recs.values() if "error" not in r]
    errors = [r for r in records.read_records(path) if "error" in r]
    by = {}
    for r in recs:
        by.setdefault(r["family"], []).append(r)
    lines = ["| family | datasets | coefficient | 50% / 90% / 95% intervals cover | rank "
             "chi-square p | exact likelihood: 90% cover, chi-square p | rank - exact rank "
             "(median abs.) | unidentified | f beyond the data: 50% / 90% / 95% cover | "
             "95% half-width / RMSE (median) | adequate | median s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    targets, panels = [], []
    order = [n for n in families() if n in by]
    for name in order:
        rs = by[name]
        coefs = list(rs[0]["coefficients"])
        fcov = [np.mean([r["f_coverage"][str(p)] for r in rs]) for p in LEVELS]
        ratio = records.median([r["width_over_error"] for r in rs])
        ok = sum(bool(r["adequate"]) for r in rs)
        secs = records.median([r["seconds"] for r in rs])
        for j, c in enumerate(coefs):
            cov = [np.mean([r["coefficients"][c]["covers"][str(p)] for r in rs]) for p in LEVELS]
            ranks = [r["coefficients"][c]["rank"] for r in rs
                     if r["coefficients"][c]["rank"] is not None]
            p, counts = _chi2(ranks) if ranks else (float("nan"), None)
            refs = [r["coefficients"][c]["reference"]["rank"] for r in rs
                    if "reference" in r["coefficients"][c]]
            if refs:
                p_ref = _chi2(refs)[0]
                cov_ref = float(np.mean([abs(u - 0.5) < 0.45 for u in refs]))
                gap = records.median([abs(r["coefficients"][c]["rank"]
                                          - r["coefficients"][c]["reference"]["rank"])
                                      for r in rs if "reference" in r["coefficients"][c]
                                      and r["coefficients"][c]["rank"] is not None])
                ref_text = f"{cov_ref:.2f}, {p_ref:.3f} | {gap:.3f}"
            else:
                ref_text = "- | -"
            free = sum(not r["coefficients"][c]["identified"] for r in rs)
            judged = [r for r in rs if "identified" in r["coefficients"][c].get("reference", {})]
            if judged:
                free_exact = sum(not r["coefficients"][c]["reference"]["identified"]
                                 for r in judged)
                free = f"{free} (exact {free_exact})"
            head = (f"| {name} | {len(rs)} | " if j == 0 else "| | | ")
            tail = (f"{' / '.join(f'{x:.2f}' for x in fcov)} | {ratio:.2f} | {ok}/{len(rs)} | "
                    f"{secs:.1f} |" if j == 0 else " | | | |")
            lines.append(f"{head}{c} | {' / '.join(f'{x:.2f}' for x in cov)} | {p:.3f} | "
                         f"{ref_text} | {free} | {tail}")
            targets.append((name, c, cov[1], p, len(rs)))
            panels.append((name, c, ranks))
    nuts_lines = _nuts_summary(by, order)
    if nuts_lines:
        lines += [""] + nuts_lines
    lines += _verdict_lines(by, order)
    lines += ["", "Targets (issue 39), per family and coefficient:", ""]
    for name, c, cov90, p, n in targets:
        lines.append(f"- {name} {c}: 90% intervals cover {cov90:.2f} (target 0.85-0.95: "
                     f"{'met' if 0.85 <= cov90 <= 0.95 else 'missed'}); rank histogram "
                     f"chi-square p {p:.3f} (target >= 0.01: "
                     f"{'met' if p >= 0.01 else 'missed'}); {n} datasets")
    if errors:
        lines.append(f"\n{len(errors)} fits raised an error (recorded with their traceback)")
    if figure and panels:
        _figure(panels, figure)
        lines.append(f"\nRank histograms: {os.path.relpath(figure, os.path.dirname(path))}")
    return "\n".join(lines)


def _verdict_lines(by, order):
    """Per family, the datasets on which every coefficient's identified / free verdict is the
    exact-likelihood reference's (issue 64's target: at least 95%)."""
    lines = []
    for name in order:
        rs = [r for r in by[name] if all("identified" in v.get("reference", {})
                                         for v in r["coefficients"].values())]
        if not rs:
            continue
        agree = sum(all(v["identified"] == v["reference"]["identified"]
                        for v in r["coefficients"].values()) for r in rs)
        if not lines:
            lines = ["", "Identified / free verdicts against the exact likelihood's, by the "
                     "same rule (issue 64):", ""]
        share = agree / len(rs)
        lines.append(f"- {name}: every verdict agrees on {agree} of {len(rs)} datasets "
                     f"({share:.0%}; target >= 95%: {'met' if share >= 0.95 else 'missed'})")
    return lines


def _nuts_summary(by, order):
    """The NUTS rows of the records that have them: coverage, chi-square, seconds."""
    lines = []
    for name in order:
        rs = [r for r in by[name] if "nuts" in r]
        if not rs:
            continue
        if not lines:
            lines = ["NUTS from the fit (one chain), the same datasets:", "",
                     "| family | datasets | coefficient | 50% / 90% / 95% intervals cover | "
                     "rank chi-square p | Laplace 90% cover, same datasets | median s |",
                     "|---|---|---|---|---|---|---|"]
        for j, c in enumerate(rs[0]["nuts"]["coefficients"]):
            cov = [np.mean([r["nuts"]["coefficients"][c]["covers"][str(p)] for r in rs])
                   for p in LEVELS]
            p_val = _chi2([r["nuts"]["coefficients"][c]["rank"] for r in rs])[0]
            lap = np.mean([r["coefficients"][c]["covers"]["0.9"] for r in rs])
            secs = records.median([r["nuts"]["seconds"] for r in rs])
            lines.append(f"| {name if j == 0 else ''} | {len(rs) if j == 0 else ''} | {c} | "
                         f"{' / '.join(f'{x:.2f}' for x in cov)} | {p_val:.3f} | {lap:.2f} | "
                         f"{secs:.0f} |")
    return lines


def _figure(panels, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cols = 4
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, c, ranks) in zip(axes.flat, panels):
        n = len(ranks)
        ax.hist(ranks, bins=BINS, range=(0, 1), color="C0", edgecolor="white")
        if n:
            # the band a uniform histogram stays in 99% of the time, bin by bin
            from scipy import stats
            lo, hi = stats.binom.ppf([0.005, 0.995], n, 1 / BINS)
            ax.axhspan(lo, hi, color="0.85", zorder=0)
            ax.axhline(n / BINS, color="0.4", lw=0.8)
        ax.set_title(f"{name}: {c} ({n})", fontsize=9)
        ax.set_xticks([0, 0.5, 1])
        ax.tick_params(labelsize=7)
    fig.suptitle("Rank of the truth under the Laplace posterior (uniform when calibrated; "
                 "grey: 99% band of a uniform histogram)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--families", default=None, help="comma-separated (default: all)")
    p.add_argument("--seeds", default="0-99")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--nuts", default=None,
                   help="WARMUP+DRAWS: NUTS from each fit too, one chain (e.g. 300+300; "
                        "use another --out)")
    p.add_argument("--figure", default=None,
                   help=f"where the rank figure goes (default: {os.path.relpath(FIGURE)} for "
                        f"the default --out, none for another)")
    args = p.parse_args(argv)
    if not args.summary:
        run(args)
    figure = args.figure or (FIGURE if os.path.abspath(args.out) == os.path.abspath(DEFAULT_OUT)
                             else None)    # another file's records do not redraw the docs'
    print(summary(args.out, figure))


if __name__ == "__main__":
    main()
