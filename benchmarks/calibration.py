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
  the mean 95% half-width over the RMSE (sharpness: a band can cover because it is wide).

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
    ``beta`` a, b), ``draw(gen)`` -> ``(truth, data, test)``, ``build(data)`` -> model."""

    def __init__(self, name, kind, priors, simulate, build):
        self.name, self.kind, self.priors = name, kind, priors
        self.simulate, self.build = simulate, build

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
    return Family(name, "scalar", priors, simulate, build)


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


def _heat_family():
    priors = {"k": ("lognormal", math.log(0.05), 0.3)}

    def solution(k, a, X):
        x, t = X[:, 0], X[:, 1]
        return sum(a[n - 1] * np.exp(-k * (n * math.pi) ** 2 * t) * np.sin(n * math.pi * x)
                   for n in (1, 2, 3))

    def simulate(truth, gen):
        a = gen.normal(0.0, 1.0, 3) / np.array([1.0, 2.0, 3.0])
        X = np.c_[gen.uniform(0, 1, 60), gen.uniform(0, 0.4, 60)]
        T = np.c_[gen.uniform(0, 1, 200), gen.uniform(0.4, 1.0, 200)]
        f = solution(truth["k"], a, X)
        return {"X": X, "y": f + 0.02 * np.std(f) * gen.standard_normal(60), "X_test": T,
                "f_test": solution(truth["k"], a, T)}

    def build(data):
        import torch
        import pyro_pidkl as pk
        from pyro_pidkl.physics import Equation
        eq = Equation(heat, inputs=("x", "t"), **_parameters(priors))
        return pk.PhysicsConditionedGP(torch.as_tensor(data["X"]), torch.as_tensor(data["y"]),
                                       eq, input_names=("x", "t"),
                                       domain=pk.Box(x=(0.0, 1.0), t=(0.0, 1.0)))
    return Family("heat", "scalar", priors, simulate, build)


def _helmholtz_family():
    priors = {"kappa": ("lognormal", math.log(30.0), 0.2)}

    def solution(kappa, theta, phase, c, X):
        w = math.sqrt(kappa)
        return sum(cj * np.cos(w * (math.cos(th) * X[:, 0] + math.sin(th) * X[:, 1]) + ph)
                   for cj, th, ph in zip(c, theta, phase))

    def simulate(truth, gen):
        theta, phase = gen.uniform(0, 2 * math.pi, 3), gen.uniform(0, 2 * math.pi, 3)
        c = gen.normal(0.0, 1.0, 3)
        X = np.c_[gen.uniform(0, 0.4, 60), gen.uniform(0, 1, 60)]
        T = np.c_[gen.uniform(0.4, 1.0, 200), gen.uniform(0, 1, 200)]
        f = solution(truth["kappa"], theta, phase, c, X)
        return {"X": X, "y": f + 0.02 * np.std(f) * gen.standard_normal(60), "X_test": T,
                "f_test": solution(truth["kappa"], theta, phase, c, T)}

    def build(data):
        import torch
        import pyro_pidkl as pk
        from pyro_pidkl.physics import Equation
        eq = Equation(helmholtz, inputs=("x", "y"), **_parameters(priors))
        return pk.PhysicsConditionedGP(torch.as_tensor(data["X"]), torch.as_tensor(data["y"]),
                                       eq, input_names=("x", "y"),
                                       domain=pk.Box(x=(0.0, 1.0), y=(0.0, 1.0)))
    return Family("helmholtz", "scalar", priors, simulate, build)


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
    return Family("chain", "system", priors, simulate, build)


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


# -- one dataset ---------------------------------------------------------------------------

def run_one(job):
    """Fit dataset ``seed`` of family ``name``: its record (an error is recorded)."""
    name, seed, commit = job
    import torch
    torch.set_num_threads(1)
    os.environ["PIDKL_THREADS"] = "1"
    rec = {"family": name, "seed": seed, "commit": commit, "threads": 1}
    try:
        rec.update(_fit(families()[name], seed))
    except Exception as e:  # recorded, never dropped
        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rec["traceback"] = traceback.format_exc(limit=4)
    return rec


def _fit(family, seed):
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
    f = torch.as_tensor(np.asarray(data["f_test"]), dtype=mean.dtype).reshape(mean.shape)
    sd = var.clamp(min=0).sqrt()
    err = (mean - f).abs()
    f_cov = {}
    for p in LEVELS:
        z = float(stats.norm.ppf(0.5 + p / 2))
        f_cov[str(p)] = float((err <= z * sd).double().mean())
    rmse = float((mean - f).pow(2).mean().sqrt())
    half = float(1.959964 * sd.mean())
    return {"truth": truth, "coefficients": coefficients, "f_coverage": f_cov,
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
    todo = [(n, s, commit) for s in records.seeds(args.seeds) for n in names
            if (n, s) not in done]
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
             "chi-square p | unidentified | f beyond the data: 50% / 90% / 95% cover | "
             "95% half-width / RMSE (median) | adequate | median s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
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
            free = sum(not r["coefficients"][c]["identified"] for r in rs)
            head = (f"| {name} | {len(rs)} | " if j == 0 else "| | | ")
            tail = (f"{' / '.join(f'{x:.2f}' for x in fcov)} | {ratio:.2f} | {ok}/{len(rs)} | "
                    f"{secs:.1f} |" if j == 0 else " | | | |")
            lines.append(f"{head}{c} | {' / '.join(f'{x:.2f}' for x in cov)} | {p:.3f} | "
                         f"{free} | {tail}")
            targets.append((name, c, cov[1], p, len(rs)))
            panels.append((name, c, ranks))
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
    p.add_argument("--figure", default=FIGURE)
    args = p.parse_args(argv)
    if not args.summary:
        run(args)
    print(summary(args.out, args.figure))


if __name__ == "__main__":
    main()
