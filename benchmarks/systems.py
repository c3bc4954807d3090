"""Systems of equations with components nobody measured: the conditioned system GP at its
defaults against PI-DKL on the system (where every component is observed) and SKL and DKL
fitted to each observed component alone.

Problems (:mod:`pyro_pidkl.datasets.systems`, truth from scipy, coefficients started at a
generic guess, seeds 0-2): FitzHugh-Nagumo (a, b, c; both components observed), Hes1 on
the log scale (seven rates; P and M at alternating times, H never), Lotka-Volterra, SIR
with only infections observed, and a 1-D reaction-diffusion pair (two diffusivities).

Each record: per output, RMSE and 95% coverage of the truth beyond the data (observed
components; an unobserved one over the whole domain, with its RMSE relative to its
range); per coefficient, the estimate, its relative error, whether its 95% Laplace
interval covers the truth and whether it is identified at all (an unidentified one's
interval is the whole range, which covers anything; PI-DKL's are point estimates); wall
time (build, fit, intervals, prediction; the conditioned GP's fit alone as ``fit_s``), one
thread.

    python benchmarks/systems.py                 # records in docs/results/systems.jsonl
    python benchmarks/systems.py --summary
"""

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "systems.jsonl")
PROBLEMS = ("fitzhugh_nagumo", "hes1", "lotka_volterra", "sir", "reaction_diffusion")
METHODS = ("system", "pidkl", "skl", "dkl")


def run(name, method, seed):
    """One fit: a record."""
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.datasets import system_problem
    p = system_problem(name, seed)
    outputs = p.system.outputs
    out = {"outputs": {}, "coefficients": {}}
    t0 = time.perf_counter()
    if method == "system":
        model = pk.ConditionedSystemGP(p.system, p.data, input_names=p.input_names,
                                       domain=p.domain, scales=p.scales)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out["fit_s"] = pk.fit(model, progress=False, seed=seed).seconds
            intervals = model.coefficient_intervals(0.95)
            mean_test, var_test = model(p.test)
            mean_grid, var_grid = model(p.grid)
        out["warnings"] = sorted({str(w.message).split(":")[0][:80] for w in caught})
        for n, v in intervals.items():
            true = p.coefficients[n]
            out["coefficients"][n] = {
                "value": v["value"], "truth": true,
                "rel_error": abs(v["value"] - true) / abs(true),
                "covered95": bool(v["lower"] <= true <= v["upper"]),
                "identified": bool(v["identified"])}
    elif method == "pidkl":
        if any(o not in p.data for o in outputs):      # its draws need data of every output
            return {"outputs": {}, "coefficients": {}, "seconds": 0.0,
                    "refused": "an output is never observed"}
        model = pk.SystemPIDKL(p.system, p.data, input_names=p.input_names, domain=p.domain,
                               seed=seed)
        pk.fit(model, progress=False, seed=seed)
        mean_test, var_test = model(p.test)
        for n, value in model.equation_parameters().items():
            true = p.coefficients[n]
            out["coefficients"][n] = {"value": value, "truth": true,
                                      "rel_error": abs(value - true) / abs(true)}
    else:
        mean_test = torch.zeros(p.test.shape[0], len(outputs), dtype=torch.float64)
        var_test = torch.ones_like(mean_test)
        for c, o in enumerate(outputs):
            if o not in p.data:
                continue
            X, y = p.data[o]
            model = (pk.SKL(X, y, p.input_names) if method == "skl"
                     else pk.DKL(X, y, p.input_names, seed=seed))
            pk.fit(model, progress=False, seed=seed)
            m, v = model(p.test)
            mean_test[:, c], var_test[:, c] = m.detach(), v.detach()
    seconds = time.perf_counter() - t0
    truth_test, truth_grid = p.truth(p.test), p.truth(p.grid)
    for c, o in enumerate(outputs):
        if o in p.data:
            out["outputs"][o] = {
                "observed": True,
                "rmse": pk.rmse(mean_test[:, c], truth_test[:, c]),
                "coverage95": pk.coverage(mean_test[:, c], var_test[:, c], truth_test[:, c])}
        elif method == "system":
            rng = float(truth_grid[:, c].max() - truth_grid[:, c].min())
            rmse = pk.rmse(mean_grid[:, c], truth_grid[:, c])
            out["outputs"][o] = {
                "observed": False, "rmse": rmse, "rmse_over_range": rmse / rng,
                "coverage95": pk.coverage(mean_grid[:, c], var_grid[:, c], truth_grid[:, c])}
    out["seconds"] = seconds
    return out


def _key(r):
    return (r["problem"], r["method"], r["seed"])


def summary(path):
    recs = list(records.latest(records.read_records(path), _key).values())
    lines = ["| system | output | method | median RMSE beyond the data | median 95% coverage |",
             "|---|---|---|---|---|"]
    by = {}
    for r in recs:
        for o, v in r["outputs"].items():
            by.setdefault((r["problem"], o, v["observed"], r["method"]), []).append(v)
    for (prob, o, observed, method), vs in sorted(by.items(), key=lambda kv: (
            PROBLEMS.index(kv[0][0]), kv[0][1], METHODS.index(kv[0][3]))):
        label = o if observed else f"{o} (never observed; whole domain, RMSE / range)"
        rmse = records.median([v["rmse"] for v in vs])
        rel = ("" if observed else
               f" ({records.median([v['rmse_over_range'] for v in vs]):.1%} of its range)")
        lines.append(f"| {prob} | {label} | {method} | {rmse:.3g}{rel} | "
                     f"{records.median([v['coverage95'] for v in vs]):.2f} |")
    lines += ["", "| system | coefficient | truth | method | median estimate | median rel. "
              "error | 95% intervals covering (of them the whole range) | median seconds |",
              "|---|---|---|---|---|---|---|---|"]
    coefs = {}
    for r in recs:
        for n, v in r["coefficients"].items():
            coefs.setdefault((r["problem"], n, r["method"]), []).append((v, r["seconds"]))
    for (prob, n, method), vs in sorted(coefs.items(), key=lambda kv: (
            PROBLEMS.index(kv[0][0]), kv[0][1], METHODS.index(kv[0][2]))):
        covered = ("—" if "covered95" not in vs[0][0] else
                   f"{sum(v['covered95'] for v, _ in vs)}/{len(vs)} "
                   f"({sum(v['covered95'] and not v.get('identified', True) for v, _ in vs)})")
        lines.append(
            f"| {prob} | {n} | {vs[0][0]['truth']:g} | {method} | "
            f"{records.median([v['value'] for v, _ in vs]):.4g} | "
            f"{records.median([v['rel_error'] for v, _ in vs]):.1%} | {covered} | "
            f"{records.median([s for _, s in vs]):.1f} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--problems", default=",".join(PROBLEMS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0-2")
    args = p.parse_args(argv)
    if not args.summary:
        records.run_jobs(args.out, [
            ({"problem": name, "method": method, "seed": seed},
             lambda n=name, m=method, s=seed: run(n, m, s))
            for name in args.problems.split(",") for method in args.methods.split(",")
            for seed in records.seeds(args.seeds)], _key)
    print(summary(args.out))


if __name__ == "__main__":
    main()
