"""The lynx-hare record (Hudson's Bay Company pelts 1900-1920, `pk.datasets.lynx_hare`)
fitted by the conditioned system GP with log-normal counts, two ways: the system written
for the logs of the populations with Gaussian noise (method ``system``), and the system for
the populations themselves with a log-normal likelihood part (``pk.LogNormalNoise``, method
``system_lognormal``); against NumPyro's published posterior and, in the same run,
NumPyro's NUTS on the exact ODE likelihood of the Stan case study's model (its priors; the
peer of ``benchmarks/systems.py``, ``PIDKL_PEER_PYTHON``; 2 chains of 1000 + 1000).

Two fits: all 21 years (are the rates inside the reference posterior's 90% intervals?),
and the first 15 years with the next 6 forecast (how many of the 6 held-out years per
species lie in the 90% predictive interval, observation noise included?). The rates start
at 1 (the reference's are 0.02-0.8). Records in ``docs/results/lynx_hare.jsonl``.

    python benchmarks/lynx_hare.py [--methods system,system_lognormal,numpyro]
    PIDKL_PEER_PYTHON=~/peer/bin/python python benchmarks/lynx_hare.py
"""

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "lynx_hare.jsonl")
Z90 = 1.6448536269514722


def lotka_volterra_log(f, x, alpha, beta, gamma, delta):
    """Lotka-Volterra for the logs ``u``, ``v`` of the hare and lynx populations."""
    import torch
    u, v = f["hare"], f["lynx"]
    return (u.d("t") - (alpha - beta * torch.exp(v)),
            v.d("t") - (-gamma + delta * torch.exp(u)))


def _data(years):
    from pyro_pidkl.datasets.lynx_hare import lynx_hare
    t, hare, lynx = lynx_hare()
    return t, hare.log(), lynx.log(), years


def lotka_volterra(f, x, alpha, beta, gamma, delta):
    """Lotka-Volterra for the hare and lynx populations themselves."""
    u, v = f["hare"], f["lynx"]
    return (u.d("t") - (alpha - beta * v) * u, v.d("t") - (-gamma + delta * u) * v)


def run_ours(years, lognormal=False):
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.datasets.lynx_hare import REFERENCE_POSTERIOR
    from pyro_pidkl.physics import EquationSystem
    t, u, v, n = _data(years)
    psi = lotka_volterra if lognormal else lotka_volterra_log
    system = EquationSystem(psi, outputs=("hare", "lynx"), inputs=("t",),
                            alpha=1.0, beta=1.0, gamma=1.0, delta=1.0)
    began = time.perf_counter()
    data = ({"hare": (t[:n, None], u[:n].exp()), "lynx": (t[:n, None], v[:n].exp())}
            if lognormal else {"hare": (t[:n, None], u[:n]), "lynx": (t[:n, None], v[:n])})
    model = pk.ConditionedSystemGP(system, data, domain=pk.Box(t=(0.0, 20.0)),
                                   likelihoods=pk.LogNormalNoise() if lognormal else None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pk.fit(model, progress=False)
        iv = model.coefficient_intervals(0.90)
        out = {"coefficients": {}, "kept_stage": model.kept_stage,
               "warnings": sorted({str(w.message).split(":")[0][:80] for w in caught})}
        for k, (m, lo, hi) in REFERENCE_POSTERIOR.items():
            out["coefficients"][k] = {"value": iv[k]["value"], "lower": iv[k]["lower"],
                                      "upper": iv[k]["upper"],
                                      "inside_reference90": bool(lo <= iv[k]["value"] <= hi)}
        if n < len(t) and lognormal:      # log y = log f + e: by the delta method
            mean, var = model(t[n:, None])
            log_mean = mean.clamp(min=1e-12).log()
            log_var = var / mean.clamp(min=1e-12) ** 2 + torch.stack(
                [model._dispersion(c).detach() for c in range(2)])
            out["forecast"] = {
                o: _forecast(log_mean[:, c], log_var[:, c], y[n:])
                for c, (o, y) in enumerate((("hare", u), ("lynx", v)))}
        elif n < len(t):
            mean, var = model(t[n:, None], noiseless=False)
            out["forecast"] = {
                o: _forecast(mean[:, c], var[:, c], y[n:])
                for c, (o, y) in enumerate((("hare", u), ("lynx", v)))}
    out["seconds"] = time.perf_counter() - began
    return out


def _forecast(mean, var, y):
    z = ((y - mean) / var.sqrt()).abs()
    return {"inside90": int((z < Z90).sum()), "of": int(z.numel()),
            "z": [round(float(a), 3) for a in z]}


def run_peer(years, seed=0):
    import math
    import torch
    from pyro_pidkl.datasets.lynx_hare import REFERENCE_POSTERIOR
    python = os.environ.get("PIDKL_PEER_PYTHON")
    if not python:
        return None
    t, u, v, n = _data(years)
    spec = {"system": "lotka_volterra_log", "outputs": ["hare", "lynx"],
            "coefficients": ["alpha", "beta", "gamma", "delta"],
            "observations": {"hare": [t[:n].tolist(), u[:n].tolist()],
                             "lynx": [t[:n].tolist(), v[:n].tolist()]},
            "hidden": {}, "t0": 0.0, "predict": t[n:].tolist() or [20.0], "seed": seed,
            "warmup": 1000, "samples": 1000, "chains": 2, "prob": 0.90,
            # the case study's priors (its z_init ~ lognormal(log 10, 1) on the log scale),
            # the chains started at the published posterior's means
            "priors": {"rates": {"alpha": [1.0, 0.5], "gamma": [1.0, 0.5],
                                 "beta": [0.05, 0.05], "delta": [0.05, 0.05]},
                       "initial": [math.log(10.0), 1.0], "noise": [-1.0, 1.0]},
            "init": {k: m for k, (m, _, _) in REFERENCE_POSTERIOR.items()}}
    peer = records.call_peer(python, spec)
    if "refused" in peer:
        return peer
    out = {"coefficients": {}, "seconds": peer["seconds"], "versions": peer["versions"],
           "divergences": peer["divergences"]}
    for k, (m, lo, hi) in REFERENCE_POSTERIOR.items():
        w = peer["coefficients"][k]
        out["coefficients"][k] = dict(w, value=w["mean"],
                                      inside_reference90=bool(lo <= w["mean"] <= hi))
    if n < len(t):
        out["forecast"] = {}
        for o, y in (("hare", u), ("lynx", v)):
            q = peer["outputs"][o]
            mean = torch.tensor(q["mean"], dtype=torch.float64)
            var = torch.tensor(q["var"], dtype=torch.float64) + q["noise_var"]
            out["forecast"][o] = _forecast(mean, var, y[n:])
    return out


def _key(r):
    return (r["method"], r["years"])


def summary(path):
    recs = records.latest(records.read_records(path), _key)
    from pyro_pidkl.datasets.lynx_hare import REFERENCE_POSTERIOR
    lines = ["| method | years fitted | rate | estimate | 90% interval | inside the reference's "
             "90% interval | seconds |", "|---|---|---|---|---|---|---|"]
    for (method, years), r in sorted(recs.items()):
        for k, v in r["coefficients"].items():
            lines.append(f"| {method} | {years} | {k} | {v['value']:.4g} | "
                         f"[{v['lower']:.4g}, {v['upper']:.4g}] | "
                         f"{'yes' if v['inside_reference90'] else 'no'} | {r['seconds']:.0f} |")
    lines.append("| reference (NumPyro, published) | 21 | " + "; ".join(
        f"{k} {m:g} [{lo:g}, {hi:g}]" for k, (m, lo, hi) in REFERENCE_POSTERIOR.items())
        + " | | | | |")
    lines += ["", "| method | fitted on | held-out years inside the 90% predictive interval |",
              "|---|---|---|"]
    for (method, years), r in sorted(recs.items()):
        if "forecast" in r:
            lines.append(f"| {method} | 1900-{1900 + years - 1} | " + ", ".join(
                f"{o} {f['inside90']} of {f['of']}" for o, f in r["forecast"].items()) + " |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--methods", default="system,system_lognormal,numpyro")
    args = p.parse_args(argv)
    methods = args.methods.split(",")
    if not args.summary:
        jobs = [({"method": m, "years": y}, lambda y=y, m=m: run_ours(y, m == "system_lognormal"))
                for m in ("system", "system_lognormal") if m in methods for y in (21, 15)]
        if "numpyro" not in methods:
            pass
        elif os.environ.get("PIDKL_PEER_PYTHON"):
            jobs += [({"method": "numpyro", "years": y}, lambda y=y: run_peer(y))
                     for y in (21, 15)]
        else:
            print("numpyro left out: set PIDKL_PEER_PYTHON to an interpreter with numpyro")
        records.run_jobs(args.out, jobs, _key)
    print(summary(args.out))


if __name__ == "__main__":
    main()
