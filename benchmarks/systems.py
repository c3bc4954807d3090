"""Systems of equations with components nobody measured: the conditioned system GP at its
defaults against PI-DKL on the system (where every component is observed) and SKL and DKL
fitted to each observed component alone.

The state-space solver (``statespace``, ``pk.StateSpaceGP``: the ODEs only) runs beside
them with the same data, domain and scales; ``statespace_nuts`` (asked for by name) draws its
parameters by NUTS on its O(N) likelihood after the fit (2 chains of ``--draws`` warm-up and
kept draws each), to run beside NumPyro's NUTS on the exact ODE:

    PIDKL_PEER_PYTHON=~/peer/bin/python python benchmarks/systems.py --problems sir \
        --methods statespace_nuts,numpyro --seeds 0 --draws 500

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

The exact-ODE peer (``numpyro``, for the four ODEs): NumPyro's NUTS with the ODE solved in
the likelihood (``benchmarks/peers/numpyro_ode.py``, in its own environment named by
``PIDKL_PEER_PYTHON``; its versions go in each record), 2 chains of 1000 + 1000 started at
the truth: the reference posterior on the same data. The summary's last table says how
often the conditioned GP's 95% interval holds the posterior mean and how wide it is against
the posterior's 95% interval.

    python benchmarks/systems.py                 # records in docs/results/systems.jsonl
    PIDKL_PEER_PYTHON=~/peer/bin/python python benchmarks/systems.py --methods numpyro
    PIDKL_PEER_PD_PYTHON=~/peer_pd/bin/python python benchmarks/systems.py --methods probdiffeq
    python benchmarks/systems.py --summary

(the peers' environments: ``python -m venv ~/peer && ~/peer/bin/pip install numpyro``;
``python -m venv ~/peer_pd && ~/peer_pd/bin/pip install "jax[cpu]" probdiffeq==0.9.2 equinox
scipy``). The probabilistic-numerics peer (``probdiffeq``, for the four ODEs): probdiffeq's
Fenrir fit from the library's starting values (``benchmarks/peers/probdiffeq_ode.py``:
its ODE filter's marginal likelihood, L-BFGS through diffusion tempering, Laplace).
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
METHODS = ("system", "statespace", "pidkl", "skl", "dkl", "numpyro", "probdiffeq", "magi")
# the summary's order of every method, those asked for by name last
ORDER = METHODS + ("statespace_nuts", "exact")
# not run by default: "statespace_nuts" (NUTS on the state-space likelihood: minutes) and
# "exact" (the exact-ODE least-squares fit, pk.infer.fit_exact, on the four ODEs)


def run(name, method, seed):
    """One fit: a record."""
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.datasets import system_problem
    p = system_problem(name, seed)
    outputs = p.system.outputs
    out = {"outputs": {}, "coefficients": {}}
    t0 = time.perf_counter()
    if method in ("system", "statespace", "statespace_nuts"):
        if method == "system":
            model = pk.ConditionedSystemGP(p.system, p.data, input_names=p.input_names,
                                           domain=p.domain, scales=p.scales)
        else:
            try:
                model = pk.StateSpaceGP(p.system, p.data, domain=p.domain, scales=p.scales)
            except ValueError as e:            # not an explicit ODE in time
                return {"outputs": {}, "coefficients": {}, "seconds": 0.0,
                        "refused": str(e)[:120]}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out["fit_s"] = pk.fit(model, progress=False, seed=seed).seconds
            intervals = model.coefficient_intervals(0.95)
            if method == "statespace_nuts":      # NUTS on the solver's O(N) likelihood
                draws = model.sample(num_warmup=DRAWS, num_samples=DRAWS, num_chains=2,
                                     seed=seed, progress=False)
                summary_ = draws.summary(0.95)
                intervals = {n: {"value": summary_[n]["mean"], "lower": summary_[n]["lower"],
                                 "upper": summary_[n]["upper"], "identified": True}
                             for n in intervals}
                out.update(sampler_s=draws.seconds, settings={
                    "warmup": DRAWS, "samples": DRAWS, "chains": 2},
                    r_hat_max=max(v["r_hat"] for v in summary_.values()),
                    divergences=sum(len(v) for v in draws.diagnostics["divergences"].values()))
                mean_test, var_test = draws.predict(p.test)
                mean_grid, var_grid = draws.predict(p.grid)
            else:
                mean_test, var_test = model(p.test)
                mean_grid, var_grid = model(p.grid)
        out["warnings"] = sorted({str(w.message).split(":")[0][:80] for w in caught})
        for n, v in intervals.items():
            true = p.coefficients[n]
            out["coefficients"][n] = {
                "value": v["value"], "truth": true,
                "rel_error": abs(v["value"] - true) / abs(true),
                "covered95": bool(v["lower"] <= true <= v["upper"]),
                "lower": v["lower"], "upper": v["upper"],
                "identified": bool(v["identified"])}
    elif method in ("numpyro", "probdiffeq"):
        peer = run_peer(p, seed, peer=method)
        if "refused" in peer:
            return {"outputs": {}, "coefficients": {}, "seconds": 0.0, **peer}
        for n, v in peer["coefficients"].items():
            true = p.coefficients[n]
            out["coefficients"][n] = dict(v, value=v["mean"], truth=true,
                                          rel_error=abs(v["mean"] - true) / abs(true),
                                          covered95=bool(v["lower"] <= true <= v["upper"]))
        T = p.test.shape[0]
        pred = [(torch.tensor(peer["outputs"][o]["mean"], dtype=torch.float64),
                 torch.tensor(peer["outputs"][o]["var"], dtype=torch.float64)) for o in outputs]
        mean_test = torch.stack([m[:T] for m, _ in pred], 1)
        var_test = torch.stack([v[:T] for _, v in pred], 1)
        mean_grid = torch.stack([m[T:] for m, _ in pred], 1)
        var_grid = torch.stack([v[T:] for _, v in pred], 1)
        out.update(peer_seconds=peer["seconds"], divergences=peer.get("divergences"),
                   versions=peer["versions"], settings=peer["settings"])
    elif method == "magi":
        return run_magi(p, seed)
    elif method == "exact":
        return run_exact(p)
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
            model = (pk.models.SKL(X, y, p.input_names) if method == "skl"
                     else pk.models.DKL(X, y, p.input_names, seed=seed))
            pk.fit(model, progress=False, seed=seed)
            m, v = model(p.test)
            mean_test[:, c], var_test[:, c] = m.detach(), v.detach()
    seconds = time.perf_counter() - t0
    truth_test, truth_grid = p.truth(p.test), p.truth(p.grid)
    for c, o in enumerate(outputs):
        if o in p.data:
            out["outputs"][o] = {
                "observed": True,
                "rmse": pk.diagnostics.rmse(mean_test[:, c], truth_test[:, c]),
                "coverage95": pk.diagnostics.coverage(mean_test[:, c], var_test[:, c],
                                                      truth_test[:, c])}
        elif method in ("system", "statespace", "statespace_nuts", "numpyro", "probdiffeq"):
            rng = float(truth_grid[:, c].max() - truth_grid[:, c].min())
            rmse = pk.diagnostics.rmse(mean_grid[:, c], truth_grid[:, c])
            out["outputs"][o] = {
                "observed": False, "rmse": rmse, "rmse_over_range": rmse / rng,
                "coverage95": pk.diagnostics.coverage(mean_grid[:, c], var_grid[:, c],
                                                      truth_grid[:, c])}
    out["seconds"] = seconds
    return out


def run_exact(p):
    """The exact-ODE least-squares fit (``pk.infer.fit_exact``: the textbook method, multiple then
    single shooting from the library's starting values and a design of 128 more, LSODA,
    Laplace intervals) on the data the state-space model reads: its record (coefficients;
    each output's trajectory RMSE beyond the data, no band)."""
    import math
    import numpy as np
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.infer.multistart import design_half_width
    began = time.perf_counter()
    model = pk.StateSpaceGP(p.system, p.data, domain=p.domain, scales=p.scales)
    v0, _ = model._start()
    filt, P, C = model.filter, model.filter.P, model.filter.C
    scale = filt.scale.numpy()
    hidden = [c for c in range(C) if c not in filt.measured]
    found = pk.infer.fit_exact(
        model.ode, model.observations,
        [(n, t, [float(v0[k])]) for k, (n, t) in enumerate(filt.transforms)],
        np.array([v0[P:P + C] * scale]), model.t0,
        max(float(t.max()) for t, _ in model.observations if len(t)), scale, design=127,
        design_half=np.array([design_half_width(t, v0[k])
                              for k, (_, t) in enumerate(filt.transforms)]),
        design_states=np.array([3 * scale[c] if c in hidden else 0.0 for c in range(C)]))
    out = {"outputs": {}, "coefficients": {}}
    for n, v in found.intervals(0.95).items():
        true = p.coefficients[n]
        out["coefficients"][n] = {
            "value": v["value"], "truth": true, "rel_error": abs(v["value"] - true) / abs(true),
            "covered95": bool(v["lower"] <= true <= v["upper"]), "lower": v["lower"],
            "upper": v["upper"], "identified": bool(v["identified"])}
    grid = p.grid[:, 0].numpy()
    order = np.argsort(grid)
    traj = found.predict(model.ode, np.maximum(grid[order], model.t0))
    truth = p.truth(p.grid)
    for c, o in enumerate(p.system.outputs):
        if traj is None:
            out["outputs"][o] = {"observed": o in p.data, "rmse": math.inf}
            continue
        mean = torch.as_tensor(traj[c])[np.argsort(order)]
        rng = float(truth[:, c].max() - truth[:, c].min())
        rmse = pk.diagnostics.rmse(mean, truth[:, c])
        out["outputs"][o] = {"observed": o in p.data, "rmse": rmse,
                             "rmse_over_range": rmse / rng}
    out["seconds"] = time.perf_counter() - began
    return out


#: NUTS draws per chain, warm-up and kept each (NumPyro's peer and ``statespace_nuts``;
#: ``--draws``)
DRAWS = 1000


def run_peer(p, seed, warmup=None, samples=None, chains=2, peer="numpyro"):
    """NumPyro's NUTS on the exact ODE likelihood of problem ``p``
    (``benchmarks/peers/numpyro_ode.py``, run by ``PIDKL_PEER_PYTHON``), or with ``peer=
    "probdiffeq"`` probdiffeq's Fenrir fit from the library's starting values
    (``benchmarks/peers/probdiffeq_ode.py``, run by ``PIDKL_PEER_PD_PYTHON``): its JSON
    answer, or ``{"refused": why}``."""
    import math
    import torch
    variable = "PIDKL_PEER_PYTHON" if peer == "numpyro" else "PIDKL_PEER_PD_PYTHON"
    python = os.environ.get(variable)
    if not python:
        return {"refused": f"no peer interpreter (set {variable})"}
    if p.name not in ("fitzhugh_nagumo", "lotka_volterra", "sir", "hes1"):
        return {"refused": "not an ODE the peer script writes"}
    t0 = min([float(p.domain.bounds["t"][0])]
             + [float(X[:, 0].min()) for X, _ in p.data.values()])
    start = p.truth(torch.tensor([[t0]], dtype=torch.float64))[0]
    spec = {"system": p.name, "outputs": list(p.system.outputs),
            "coefficients": list(p.system.parameter_names),
            "observations": {o: [X[:, 0].tolist(), y.tolist()] for o, (X, y) in p.data.items()},
            "hidden": {o: list((p.scales or {}).get(o, (0.0, 1.0)))
                       for o in p.system.outputs if o not in p.data},
            "t0": t0, "predict": p.test[:, 0].tolist() + p.grid[:, 0].tolist(),
            "seed": seed, "warmup": warmup or DRAWS, "samples": samples or DRAWS,
            "chains": chains,
            # the reference posterior in the truth's basin: chains start at the truth
            "init": {**{"log_" + n: math.log(v) for n, v in p.coefficients.items()},
                     **{"x0_" + o: float(v) for o, v in zip(p.system.outputs, start)}},
            # where a fit starts (probdiffeq's): the library's generic guess
            "start": {n: float(getattr(p.system, n).detach()) for n in p.system.parameter_names}}
    return records.call_peer(python, spec, peer=peer + "_ode.py",
                             env={"OMP_NUM_THREADS": "1"})


def run_magi(p, seed, niter=20000):
    """MAGI (``benchmarks/peers/magi_hes1.R``, run by ``PIDKL_PEER_RSCRIPT``) on Hes1: its
    record. Its trajectories are at the 33 data times only (its discretisation): RMSE and
    coverage there, each component's against the truth at those times."""
    import numpy as np
    import pyro_pidkl as pk
    import torch
    if p.name != "hes1":
        return {"outputs": {}, "coefficients": {}, "seconds": 0.0,
                "refused": "the MAGI peer runs Hes1 (its own example)"}
    t_p, y_p = (v.numpy() for v in (p.data["P"][0][:, 0], p.data["P"][1]))
    t_m, y_m = (v.numpy() for v in (p.data["M"][0][:, 0], p.data["M"][1]))
    times = np.union1d(t_p, t_m)
    P = [float(y_p[t_p == t][0]) if t in t_p else None for t in times]
    M = [float(y_m[t_m == t][0]) if t in t_m else None for t in times]
    spec = {"times": times.tolist(), "P": P, "M": M, "sigma": 0.15, "niter": niter,
            "seed": seed}
    peer = records.call_peer(os.environ["PIDKL_PEER_RSCRIPT"], spec, peer="magi_hes1.R",
                             env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    if "refused" in peer:
        return {"outputs": {}, "coefficients": {}, "seconds": 0.0, **peer}
    out = {"outputs": {}, "coefficients": {}, "seconds": peer["seconds"],
           "peer_seconds": peer["seconds"], "cpu_seconds": peer["cpu_seconds"],
           "versions": peer["versions"], "settings": peer["settings"],
           "at": "the 33 data times"}
    for n, v in peer["coefficients"].items():
        true = p.coefficients[n]
        out["coefficients"][n] = dict(v, value=v["mean"], truth=true,
                                      rel_error=abs(v["mean"] - true) / abs(true),
                                      covered95=bool(v["lower"] <= true <= v["upper"]))
    truth = p.truth(torch.as_tensor(times))
    for c, o in enumerate(p.system.outputs):
        mean = torch.tensor(peer["trajectory"][o], dtype=torch.float64)
        var = torch.tensor(peer["trajectory_sd"][o], dtype=torch.float64) ** 2
        rmse = pk.diagnostics.rmse(mean, truth[:, c])
        rec = {"observed": o in p.data, "rmse": rmse,
               "coverage95": pk.diagnostics.coverage(mean, var, truth[:, c])}
        if o not in p.data:
            rec["rmse_over_range"] = rmse / float(truth[:, c].max() - truth[:, c].min())
        out["outputs"][o] = rec
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
            PROBLEMS.index(kv[0][0]), kv[0][1], ORDER.index(kv[0][3]))):
        label = o if observed else f"{o} (never observed; whole domain, RMSE / range)"
        rmse = records.median([v["rmse"] for v in vs])
        rel = ("" if observed else
               f" ({records.median([v['rmse_over_range'] for v in vs]):.1%} of its range)")
        band = ("—" if any("coverage95" not in v for v in vs) else
                f"{records.median([v['coverage95'] for v in vs]):.2f}")
        lines.append(f"| {prob} | {label} | {method} | {rmse:.3g}{rel} | {band} |")
    lines += ["", "| system | coefficient | truth | method | median estimate | median rel. "
              "error | 95% intervals covering (of them the whole range) | median seconds |",
              "|---|---|---|---|---|---|---|---|"]
    coefs = {}
    for r in recs:
        for n, v in r["coefficients"].items():
            coefs.setdefault((r["problem"], n, r["method"]), []).append((v, r["seconds"]))
    for (prob, n, method), vs in sorted(coefs.items(), key=lambda kv: (
            PROBLEMS.index(kv[0][0]), kv[0][1], ORDER.index(kv[0][2]))):
        covered = ("—" if "covered95" not in vs[0][0] else
                   f"{sum(v['covered95'] for v, _ in vs)}/{len(vs)} "
                   f"({sum(v['covered95'] and not v.get('identified', True) for v, _ in vs)})")
        lines.append(
            f"| {prob} | {n} | {vs[0][0]['truth']:g} | {method} | "
            f"{records.median([v['value'] for v, _ in vs]):.4g} | "
            f"{records.median([v['rel_error'] for v, _ in vs]):.1%} | {covered} | "
            f"{records.median([s for _, s in vs]):.1f} |")
    lines += ["", against_the_exact_posterior(recs), "", targets(recs)]
    lorenz = os.path.join(os.path.dirname(os.path.abspath(path)), "lorenz.jsonl")
    if os.path.exists(lorenz):            # the PINN peer, on DeepXDE's own example
        import lorenz as lorenz_benchmark
        lines += ["", "DeepXDE's Lorenz inverse example (benchmarks/lorenz.py):", "",
                  lorenz_benchmark.summary(lorenz)]
    return "\n".join(lines)


def targets(recs):
    """The issue's targets, each with its number from the records: the conditioned system
    GP's rates (median relative error over seeds <= 10%, every 95% interval covering), the
    unobserved components' 95% coverage (>= 0.85), and the seconds of a fit with intervals
    on a small system (<= 5 s) beside the peers'."""
    ours = [r for r in recs if r["method"] == "system"]
    out = ["Targets (conditioned system GP, seeds as recorded):"]
    for prob in PROBLEMS:
        rs = [r for r in ours if r["problem"] == prob]
        if not rs:
            continue
        parts = []
        for n in rs[0]["coefficients"]:
            err = records.median([r["coefficients"][n]["rel_error"] for r in rs])
            cov = sum(r["coefficients"][n]["covered95"] for r in rs)
            free = sum(not r["coefficients"][n].get("identified", True) for r in rs)
            ok = err <= 0.10 and cov == len(rs)
            parts.append(f"{n} {err:.1%} {cov}/{len(rs)}" + (f" ({free} free)" if free else "")
                         + ("" if ok else " (missed)"))
        out.append(f"- rates within 10% with 95% intervals covering, {prob}: " + ", ".join(parts))
    for prob in PROBLEMS:
        for o in sorted({o for r in ours if r["problem"] == prob for o, v in r["outputs"].items()
                         if not v["observed"]}):
            cov = records.median([r["outputs"][o]["coverage95"] for r in ours
                                  if r["problem"] == prob])
            out.append(f"- unobserved {prob} {o}: median 95% coverage {cov:.2f} (target >= 0.85"
                       f"{'' if cov >= 0.85 else ', missed'})")
    for prob in ("lotka_volterra", "fitzhugh_nagumo", "sir"):
        secs = {m: records.median([r["seconds"] for r in recs
                                   if r["problem"] == prob and r["method"] == m])
                for m in ("system", "numpyro", "magi")
                if any(r["problem"] == prob and r["method"] == m for r in recs)}
        if "system" in secs:
            out.append(f"- a small system with intervals in <= 5 s, {prob}: "
                       + ", ".join(f"{m} {s:.0f} s" for m, s in secs.items())
                       + ("" if secs["system"] <= 5 else " (missed)"))
    return "\n".join(out)


def against_the_exact_posterior(recs):
    """Per coefficient, the conditioned system GP's 95% interval against NumPyro's exact-ODE
    posterior on the same data (seed by seed): how often it holds the posterior mean, and
    its width over the posterior's 95% interval; with the seconds of each."""
    peer = {(r["problem"], r["seed"]): r for r in recs
            if r["method"] == "numpyro" and r["coefficients"]}
    lines = ["| system | coefficient | NumPyro mean (median) | intervals holding it | median "
             "width ratio (ours / NumPyro) | R-hat (max) | seconds: ours, NumPyro (median) |",
             "|---|---|---|---|---|---|---|"]
    rows = {}
    for r in recs:
        q = peer.get((r["problem"], r["seed"]))
        if r["method"] != "system" or q is None:
            continue
        for n, v in r["coefficients"].items():
            if "lower" not in v:
                continue
            w = q["coefficients"][n]
            rows.setdefault((r["problem"], n), []).append(
                (w["mean"], v["lower"] <= w["mean"] <= v["upper"],
                 (v["upper"] - v["lower"]) / (w["upper"] - w["lower"]), w["r_hat"],
                 r["seconds"], q["peer_seconds"]))
    for (prob, n), vs in sorted(rows.items(), key=lambda kv: (PROBLEMS.index(kv[0][0]),
                                                              kv[0][1])):
        lines.append(f"| {prob} | {n} | {records.median([v[0] for v in vs]):.4g} | "
                     f"{sum(v[1] for v in vs)}/{len(vs)} | "
                     f"{records.median([v[2] for v in vs]):.2f} | "
                     f"{max(v[3] for v in vs):.3f} | "
                     f"{records.median([v[4] for v in vs]):.0f}, "
                     f"{records.median([v[5] for v in vs]):.0f} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def main(argv=None):
    global DRAWS
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    p.add_argument("--problems", default=",".join(PROBLEMS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--draws", type=int, default=DRAWS,
                   help="NUTS warm-up and kept draws per chain (numpyro, statespace_nuts)")
    args = p.parse_args(argv)
    DRAWS = args.draws
    methods = args.methods.split(",")
    if "numpyro" in methods and not os.environ.get("PIDKL_PEER_PYTHON") and not args.summary:
        print("numpyro left out: set PIDKL_PEER_PYTHON to an interpreter with numpyro and jax")
        methods.remove("numpyro")
    if "probdiffeq" in methods and not os.environ.get("PIDKL_PEER_PD_PYTHON") \
            and not args.summary:
        print("probdiffeq left out: set PIDKL_PEER_PD_PYTHON to an interpreter with probdiffeq, "
              "jax, equinox and scipy")
        methods.remove("probdiffeq")
    if "magi" in methods and not os.environ.get("PIDKL_PEER_RSCRIPT") and not args.summary:
        print("magi left out: set PIDKL_PEER_RSCRIPT to an Rscript with the magi package")
        methods.remove("magi")
    if not args.summary:
        records.run_jobs(args.out, [
            ({"problem": name, "method": method, "seed": seed},
             lambda n=name, m=method, s=seed: run(n, m, s))
            for name in args.problems.split(",") for method in methods
            for seed in records.seeds(args.seeds)
            if (method not in ("numpyro", "probdiffeq", "exact") or name != "reaction_diffusion")
            and (method != "magi" or name == "hes1")], _key)
    print(summary(args.out))


if __name__ == "__main__":
    main()
