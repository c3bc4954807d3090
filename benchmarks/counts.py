"""Counts as observations (``ConditionedSystemGP(likelihoods=...)``, and one equation,
``PhysicsConditionedGP(likelihood=...)``): coverage of a rate's 95% interval over simulated
datasets, at the models' defaults, against the exact answer.

The problem: the log of the mean of counts grows at rate r, ``u' = r`` (truth r = 0.3,
u(0) = log 5) on [0, 6], 30 counts, Poisson or negative binomial (dispersion 4), r started
at 1, as a system of one output (``counts``) and as one equation (``equation``); the same
equation with a Gaussian likelihood on ``log(y + 1/2)`` beside them (what a user without a
count likelihood would do). The reference: the exact GLM (Poisson, or
negative binomial with its dispersion, both by maximum likelihood) with its Wald 95%
interval. Each record: the estimate, the interval, whether it covers the truth, its width,
the GLM's, and seconds (one thread).

    python benchmarks/counts.py                     # records in docs/results/counts.jsonl
    python benchmarks/counts.py --summary
"""

import argparse
import math
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "counts.jsonl")
R_TRUE, LEVEL, DISPERSION = 0.3, 5.0, 4.0
KINDS = ("poisson", "negative_binomial")
METHODS = ("counts", "equation", "gaussian_on_logs", "glm")


def growth(f, x, r):
    return (f["u"].d("t") - r,)


def data(kind, seed, n=30):
    import numpy as np
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, 6.0, n)
    mu = LEVEL * np.exp(R_TRUE * t)
    if kind == "negative_binomial":
        mu = rng.gamma(DISPERSION, mu / DISPERSION)
    return t, rng.poisson(mu).astype(float)


def glm(kind, t, y):
    """The exact GLM log mu = a + r t (and the NB dispersion): MLE and Wald sd of r."""
    import numpy as np
    import scipy.optimize
    from scipy.special import gammaln
    X = np.c_[np.ones_like(t), t]

    def nll(p):
        eta = X @ p[:2]
        mu = np.exp(eta)
        if kind == "poisson":
            return -(y * eta - mu - gammaln(y + 1)).sum()
        r = np.exp(p[2])
        return -(gammaln(y + r) - gammaln(r) - gammaln(y + 1) + r * (np.log(r) - np.log(r + mu))
                 + y * (eta - np.log(r + mu))).sum()
    p0 = [math.log(max(y.mean(), 0.5)), 0.1] + ([0.0] if kind != "poisson" else [])
    fit = scipy.optimize.minimize(nll, p0, method="BFGS")
    fit = scipy.optimize.minimize(nll, fit.x, method="Nelder-Mead",
                                  options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 20000})
    h = 1e-4
    k = len(fit.x)
    H = np.zeros((k, k))
    for i in range(k):
        for j in range(k):
            e_i, e_j = np.eye(k)[i] * h, np.eye(k)[j] * h
            H[i, j] = (nll(fit.x + e_i + e_j) - nll(fit.x + e_i - e_j)
                       - nll(fit.x - e_i + e_j) + nll(fit.x - e_i - e_j)) / (4 * h * h)
    sd = float(np.sqrt(np.linalg.inv(H)[1, 1]))
    return float(fit.x[1]), sd


def run(kind, method, seed):
    import numpy as np
    import torch
    t, y = data(kind, seed)
    began = time.perf_counter()
    if method == "glm":
        r, sd = glm(kind, t, y)
        lo, hi = r - 1.959964 * sd, r + 1.959964 * sd
        out = {"value": r, "lower": lo, "upper": hi}
    else:
        import pyro_pidkl as pk
        from pyro_pidkl.physics import EquationSystem
        T = torch.as_tensor(t)
        system = EquationSystem(growth, outputs=("u",), inputs=("t",), r=1.0)
        if method == "counts":
            model = pk.ConditionedSystemGP(system, {"u": (T, torch.as_tensor(y))},
                                           likelihoods={"u": kind})
        elif method == "equation":
            eq = pk.Equation(lambda f, x, r: f.d("t") - r, inputs=("t",), r=1.0)
            model = pk.PhysicsConditionedGP(T[:, None], torch.as_tensor(y), eq, likelihood=kind)
        else:
            model = pk.ConditionedSystemGP(system, {"u": (T, torch.as_tensor(np.log(y + 0.5)))})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pk.fit(model, progress=False, seed=seed)
            iv = model.coefficient_intervals(0.95)["r"]
        out = {"value": iv["value"], "lower": iv["lower"], "upper": iv["upper"],
               "identified": bool(iv["identified"]),
               "warnings": sorted({str(w.message).split(":")[0][:80] for w in caught})}
        if method in ("counts", "equation") and kind == "negative_binomial":
            out["dispersion"] = float(model.dispersion_0.detach())
    out.update(covered95=bool(out["lower"] <= R_TRUE <= out["upper"]),
               width=out["upper"] - out["lower"], seconds=time.perf_counter() - began)
    return out


def _key(r):
    return (r["kind"], r["method"], r["seed"])


def summary(path):
    recs = records.latest(records.read_records(path), _key)
    lines = ["| counts | method | seeds | median r (truth 0.3) | 95% intervals covering | "
             "median width | median width / the GLM's | median seconds |",
             "|---|---|---|---|---|---|---|---|"]
    glm_width = {(k, s): r["width"] for (k, m, s), r in recs.items() if m == "glm"}
    for kind in KINDS:
        for method in METHODS:
            rs = [r for (k, m, _), r in recs.items() if k == kind and m == method]
            if not rs:
                continue
            ratio = [r["width"] / glm_width[(kind, r["seed"])] for r in rs
                     if (kind, r["seed"]) in glm_width]
            lines.append(
                f"| {kind} | {method} | {len(rs)} | "
                f"{records.median([r['value'] for r in rs]):.4f} | "
                f"{sum(r['covered95'] for r in rs)}/{len(rs)} | "
                f"{records.median([r['width'] for r in rs]):.3f} | "
                f"{records.median(ratio):.2f} | "
                f"{records.median([r['seconds'] for r in rs]):.1f} |")
    for kind in KINDS:
        for method in ("counts", "equation"):
            pairs = [(r, recs[(kind, "glm", s)]) for (k, m, s), r in recs.items()
                     if k == kind and m == method and (kind, "glm", s) in recs]
            if not pairs:
                continue
            # the GLM's standard error from its Wald interval
            off = sorted(abs(r["value"] - g["value"]) / (g["width"] / (2 * 1.959964))
                         for r, g in pairs)
            lines.append(f"\n{kind}, {method}: r from the GLM's, in GLM standard errors: "
                         f"median {records.median(off):.2f}, over 2 on {sum(v > 2 for v in off)}"
                         f" of {len(off)} ({', '.join(f'{v:.1f}' for v in off if v > 2) or 'none'})")
            disp = [r["dispersion"] for r, _ in pairs if "dispersion" in r]
            if disp:
                lines.append(f"{kind}, {method}: dispersion (truth {DISPERSION:g}) median "
                             f"{records.median(disp):.2f}, {min(disp):.2f}-{max(disp):.2f}")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--seeds", default="0-19")
    p.add_argument("--summary", action="store_true")
    args = p.parse_args(argv)
    if not args.summary:
        records.run_jobs(args.out, [
            ({"kind": k, "method": m, "seed": s}, lambda k=k, m=m, s=s: run(k, m, s))
            for s in records.seeds(args.seeds) for k in KINDS for m in METHODS], _key)
    print(summary(args.out))


if __name__ == "__main__":
    main()
