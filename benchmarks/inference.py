"""Laplace, variational guides and NUTS over a conditioned GP's coefficients, side by side.

On the equation benchmark's problems with learned coefficients (``pyro_pidkl.datasets``;
the extrapolation split: noisy data on the first 40% of the domain, coefficients started at
half the truth), each seed: one ``pk.fit`` (L-BFGS-B, the GP's parameters and the
coefficients' MAP), then from the same fitted model

* ``laplace``: ``coefficient_intervals`` and the prediction with its sigma points;
* ``normal``, ``mvn``, ``iaf``: ``pk.infer.fit_coefficient_guide`` (AutoNormal,
  AutoMultivariateNormal, AutoIAFNormal), ``--guide-steps`` SVI steps, over the coefficients
  and the GP's identified parameters;
* ``nuts``: ``pk.infer.sample_coefficients``, ``--warmup`` + ``--draws``, one chain, the same;
* ``nuts_held``: the same with the GP's parameters held at the fit (empirical Bayes);
* ``pidkl``: PI-DKL (gamma 1, m 10, ``pk.fit``'s defaults) with a prior on each learned
  coefficient (LogNormal(log start, 1.5), uniform on [0, 1] for a fraction) and its
  ``AutoNormal`` guide over them: ``physics.equation_posterior``;

scored by each coefficient's relative error (posterior mean), whether its 90% interval
covers the truth, the RMSE of the predictive mean beyond the data against the exact
solution and its 95% coverage of it, and the seconds each took (the fit's not included).

    python benchmarks/inference.py --problems oscillator,heat --seeds 0-2
    python benchmarks/inference.py --summary

Records: ``docs/results/inference.jsonl`` (one line per problem, seed and method).
"""

import argparse
import multiprocessing as mp
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "inference.jsonl")
METHODS = ("laplace", "normal", "mvn", "iaf", "nuts", "nuts_held", "pidkl")


def run_one(job):
    """Every method on one (problem, seed): a list of records."""
    name, seed, warmup, draws, guide_steps, commit = job
    import torch
    torch.set_num_threads(1)
    os.environ["PIDKL_THREADS"] = "1"
    import pyro_pidkl as pk
    problem = pk.datasets.problem(name)
    data = problem.sample("extrapolation", seed)
    X = torch.as_tensor(data.X_test)
    f = torch.as_tensor(data.f_test)
    out = []
    try:
        box = pk.Box(**problem.domain)
        source = "gp" if problem.source == "gp" else "zero"
        model = pk.PhysicsConditionedGP(data.X_train, data.y_train, problem.equation(),
                                        problem.input_names, domain=box, source=source)
        fit = pk.fit(model, progress=False, seed=seed)
    except Exception as e:
        return [{"task": name, "seed": seed, "method": m, "commit": commit,
                 "error": f"{type(e).__name__}: {e}"} for m in METHODS]
    for method in METHODS:
        rec = {"task": name, "seed": seed, "method": method, "commit": commit, "threads": 1,
               "fit_s": fit.seconds}
        try:
            t0 = time.perf_counter()
            if method == "laplace":
                iv = model.coefficient_intervals(0.9)
                est = {k: iv[k]["value"] for k in problem.learned}
                lo = {k: iv[k]["lower"] for k in problem.learned}
                hi = {k: iv[k]["upper"] for k in problem.learned}
                mean, var = model(X)
            elif method == "pidkl":
                pidkl = pk.PIDKL(data.X_train, data.y_train, bayes_equation(problem),
                                 problem.input_names, domain=box)
                rec["fit_s"] = pk.fit(pidkl, progress=False, seed=seed).seconds
                s = pidkl.physics.equation_posterior(prob=0.9, seed=seed)
                est = {k: s[k]["mean"] for k in problem.learned}
                lo = {k: s[k]["lower"] for k in problem.learned}
                hi = {k: s[k]["upper"] for k in problem.learned}
                mean, var = pidkl(X)
            else:
                held = method == "nuts_held"
                post = (pk.infer.sample_coefficients(model, num_warmup=warmup, num_samples=draws,
                                               seed=seed, hyperparameters=not held)
                        if method.startswith("nuts") else
                        pk.infer.fit_coefficient_guide(model, guide=method, num_steps=guide_steps,
                                                 num_samples=1000, seed=seed))
                s = post.summary(0.9)
                est = {k: s[k]["mean"] for k in problem.learned}
                lo = {k: s[k]["lower"] for k in problem.learned}
                hi = {k: s[k]["upper"] for k in problem.learned}
                mean, var = post.predict(X, num_draws=40)
                rec["sampled"] = list(post.samples)
                if method.startswith("nuts"):
                    rec["r_hat"] = {k: v["r_hat"] for k, v in s.items()}
                    rec["divergences"] = sum(len(v) for v in
                                             post.diagnostics["divergences"].values())
            rec["seconds"] = time.perf_counter() - t0
            truth = problem.truth
            rec.update(params=est,
                       param_rel_error={k: abs(est[k] - truth[k]) / abs(truth[k]) for k in est},
                       interval_covers={k: lo[k] <= truth[k] <= hi[k] for k in est},
                       rmse=float(pk.diagnostics.rmse(mean, f)),
                       coverage95=float(pk.diagnostics.coverage(mean, var, f)))
        except Exception as e:  # recorded, never dropped
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            rec["traceback"] = traceback.format_exc(limit=3)
        out.append(rec)
    return out


def bayes_equation(problem):
    """The problem's equation with a prior on each learned coefficient, centred where the
    fit starts (half the truth): LogNormal(log start, 1.5), or uniform on [0, 1] for a
    coefficient constrained to it."""
    import math

    import pyro.distributions as dist
    from torch.distributions import constraints

    from pyro_pidkl.physics import Equation, Parameter
    eq = problem.equation()
    params = {}
    for name, spec in eq.specs.items():
        if spec.fixed:
            params[name] = spec
        elif spec.constraint is constraints.unit_interval:
            params[name] = Parameter(spec.init, spec.constraint, prior=dist.Uniform(0.0, 1.0))
        else:
            params[name] = Parameter(spec.init, spec.constraint, prior=dist.LogNormal(
                math.log(float(spec.init)), 1.5))
    return Equation(eq.psi, inputs=eq.inputs, name=eq.name, **params)


def summary(path):
    recs = records.latest(records.read_records(path),
                          lambda r: (r["task"], r["seed"], r["method"]))
    lines = ["| method | coefficient error (median) | 90% intervals cover | predictive RMSE "
             "(median) | 95% coverage (median) | seconds (median) | failed |",
             "|---|---|---|---|---|---|---|"]
    for m in METHODS:
        rs = [r for r in recs.values() if r["method"] == m]
        ok = [r for r in rs if "error" not in r]
        if not rs:
            continue
        errs = [e for r in ok for e in r["param_rel_error"].values()]
        covers = [c for r in ok for c in r["interval_covers"].values()]
        lines.append(
            f"| {m} | {records.median(errs) if errs else float('nan'):.3f} | "
            f"{sum(covers)}/{len(covers)} | "
            f"{records.median([r['rmse'] for r in ok]) if ok else float('nan'):.4f} | "
            f"{records.median([r['coverage95'] for r in ok]) if ok else float('nan'):.2f} | "
            f"{records.median([r['seconds'] for r in ok]) if ok else float('nan'):.1f} | "
            f"{len(rs) - len(ok)} |")
    tasks = sorted({r["task"] for r in recs.values()})
    present = [m for m in METHODS if any(r["method"] == m for r in recs.values())]
    lines += ["", "Share of 90% intervals that cover the truth, per problem:", "",
              "| problem | " + " | ".join(present) + " |",
              "|---|" + "---|" * len(present)]
    for task in tasks:
        cells = []
        for m in present:
            covers = [c for r in recs.values() if r["task"] == task and r["method"] == m
                      and "error" not in r for c in r["interval_covers"].values()]
            cells.append(f"{sum(covers) / len(covers):.2f}" if covers else "-")
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    nuts = [r for r in recs.values() if r["method"].startswith("nuts") and "error" not in r]
    if nuts:
        worst = max((v for r in nuts for v in r["r_hat"].values() if v == v),
                    default=float("nan"))
        lines += ["", f"NUTS: largest R-hat {worst:.3f} (one chain, split), divergences "
                  f"{sum(r['divergences'] for r in nuts)} in {len(nuts)} runs"]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", default="oscillator,oscillator_forced,ode1_forced,heat,wave,"
                   "advection")
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--guide-steps", type=int, default=800)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--summary", action="store_true")
    args = p.parse_args(argv)
    if not args.summary:
        commit = records.commit()
        done = {(r["task"], r["seed"]) for r in records.read_records(args.out)}
        jobs = [(name, seed, args.warmup, args.draws, args.guide_steps, commit)
                for name in args.problems.split(",") for seed in records.seeds(args.seeds)
                if (name, seed) not in done]
        print(f"{len(jobs)} (problem, seed) pairs to run -> {args.out}", flush=True)
        ctx = mp.get_context("spawn")
        with open(args.out, "a") as fh, ctx.Pool(args.jobs) as pool:
            for recs in pool.imap_unordered(run_one, jobs):
                for rec in recs:
                    records.append(fh, rec)
                    print(rec.get("error") or
                          f"{rec['task']} seed {rec['seed']} {rec['method']}: coef "
                          f"{rec['params']} covers {rec['interval_covers']} rmse "
                          f"{rec['rmse']:.4g} cov {rec['coverage95']:.2f} "
                          f"{rec['seconds']:.1f} s", flush=True)
    print(summary(args.out))


if __name__ == "__main__":
    main()
