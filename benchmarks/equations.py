"""The equation benchmark: does the equation make the prediction better where there are no
data, and are its coefficients recovered?

Thirteen problems (``pyro_pidkl.datasets.PROBLEMS``: ODEs, heat, wave, advection,
Laplace/Poisson on a 2 x 1 rectangle, Fisher-KPP, Burgers, a bistable front), each with an
interpolation split (training points over the whole domain) and an extrapolation split
(training on the first part of one input's range), noisy training data, seeds 0-2.

The rule, fixed before the benchmark ran (nothing is tuned per problem or on test numbers):

* every method at its documented defaults, trained by ``pk.fit(num_steps=1000, lr=0.01)``
  (which fits the deterministic objectives, ``pcgp`` and ``skl``, by L-BFGS-B with at most
  that many iterations, and the others by that many Adam steps);
* the models with physics get the problem's whole domain (``Box``) and its equation with
  the unknown coefficients started at half the truth; the source is ``"gp"`` where the
  problem's source is unknown (``ode1_source``), else ``"zero"`` (the equation as written,
  with any known forcing inside ``psi``);
* methods: ``skl``, ``dkl``, ``pidkl`` (``PIDKL``: gamma 1, m 10), ``pcgp``
  (``PhysicsConditionedGP``: SE kernel, 200 Sobol collocation points), and ``lfm`` where a
  latent force model of the library applies (first-order ODEs; the heat equation).

Scores: ``rmse`` against the noise-free solution; ``crps``, ``coverage95`` and ``test_lpd``
of the predictive distribution of ``y`` (``f`` plus the learned noise) against noisy test
targets. One JSON line per fit, appended and flushed as each fit ends; a rerun skips the fits
already in the file (``--force`` redoes them).

    python benchmarks/equations.py --jobs 2                 # the whole benchmark
    python benchmarks/equations.py --summary                # tables and targets
"""

import argparse
import math
import multiprocessing as mp
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

METHODS = ("skl", "dkl", "pidkl", "pcgp", "lfm")
DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results",
                           "equations.jsonl")


def build(method, problem, data):
    import pyro_pidkl as pk
    X, y, names = data.X_train, data.y_train, problem.input_names
    box = pk.Box(**problem.domain)
    if method == "skl":
        return pk.models.SKL(X, y, names)
    if method == "dkl":
        return pk.models.DKL(X, y, names)
    if method == "pidkl":
        return pk.PIDKL(X, y, problem.equation(), names, domain=box)
    if method == "pcgp":
        source = "gp" if problem.source == "gp" else "zero"
        return pk.PhysicsConditionedGP(X, y, problem.equation(), names, domain=box,
                                       source=source)
    if method == "lfm":
        return pk.models.LFM(X, y, names, **problem.lfm)
    raise ValueError(f"Unknown method {method!r}; expected one of {METHODS}")


def run_one(job):
    """Fit one (problem, split, method, seed) and return its record."""
    name, split, method, seed, steps, commit = job
    import torch
    torch.set_num_threads(1)
    import pyro_pidkl as pk
    problem = pk.datasets.problem(name)
    data = problem.sample(split, seed)
    rec = {"task": name, "split": split, "method": method, "seed": seed, "steps": steps,
           "commit": commit, "threads": torch.get_num_threads()}
    try:
        t0 = time.perf_counter()
        model = build(method, problem, data)
        pk.fit(model, num_steps=steps, lr=0.01, seed=seed, progress=False)
        rec["optimiser"] = "lbfgs" if getattr(model, "deterministic", False) else "adam"
        rec["fit_s"] = round(time.perf_counter() - t0, 2)
        mean, var = model(data.X_test, noiseless=False)
        f = torch.as_tensor(data.f_test)
        yt = torch.as_tensor(data.y_test)
        rec.update(rmse=pk.diagnostics.rmse(mean, f), crps=pk.diagnostics.crps(mean, var, yt),
                   coverage95=pk.diagnostics.coverage(mean, var, yt),
                   test_lpd=pk.diagnostics.test_log_predictive_density(mean, var, yt))
        rec = {k: (float(v) if hasattr(v, "item") else v) for k, v in rec.items()}
        if method in ("pidkl", "pcgp") and problem.learned:
            est = model.equation_parameters()
            rec["params"] = {k: est[k] for k in problem.learned}
            rec["param_rel_error"] = {k: abs(est[k] - problem.truth[k]) / abs(problem.truth[k])
                                      for k in problem.learned}
            if method == "pcgp":
                iv = model.coefficient_intervals(0.9)
                rec["interval90"] = {k: [iv[k]["lower"], iv[k]["upper"]]
                                     for k in problem.learned}
                rec["interval_covers"] = {k: iv[k]["lower"] <= problem.truth[k] <= iv[k]["upper"]
                                          for k in problem.learned}
    except Exception as e:  # recorded, never silently dropped
        rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rec["traceback"] = traceback.format_exc(limit=3)
    return rec


def _key(rec):
    return (rec["task"], rec["split"], rec["method"], rec["seed"])


def jobs_for(args):
    import pyro_pidkl as pk
    names = list(pk.datasets.PROBLEMS) if args.problems == "all" else args.problems.split(",")
    seeds = records.seeds(args.seeds)
    commit = records.commit()
    out = []
    for name in names:
        problem = pk.datasets.problem(name)
        for split in args.splits.split(","):
            for seed in seeds:
                for method in args.methods.split(","):
                    if method == "lfm" and problem.lfm is None:
                        continue
                    out.append((name, split, method, seed, args.steps, commit))
    return out


def run(args):
    done = {_key(r) for r in records.read_records(args.out) if "error" not in r and
            r.get("steps") == args.steps} if not args.force else set()
    todo = [j for j in jobs_for(args) if j[:4] not in done]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "a"):
        pass
    print(f"{len(todo)} fits to run ({len(done)} already recorded) -> {args.out}", flush=True)
    ctx = mp.get_context("spawn")
    with open(args.out, "a") as fh, ctx.Pool(args.jobs) as pool:
        for i, rec in enumerate(pool.imap_unordered(run_one, todo), 1):
            records.append(fh, rec)
            msg = rec.get("error") or f"rmse {rec['rmse']:.4g} cov {rec['coverage95']:.2f} " \
                                      f"{rec['fit_s']:.0f}s"
            print(f"[{i}/{len(todo)}] {rec['task']} {rec['split']} {rec['method']} "
                  f"seed {rec['seed']}: {msg}", flush=True)


def latest(recs):
    """The last record of each (task, split, method, seed): a rerun replaces earlier ones."""
    return list(records.latest(recs, _key).values())


def summary(path, steps=1000):
    recs = latest([r for r in records.read_records(path) if r.get("steps") == steps])
    errors = [r for r in recs if "error" in r]
    recs = [r for r in recs if "error" not in r]
    tasks = sorted({r["task"] for r in recs}, key=lambda t: list(_problem_names()).index(t))
    cell = {}
    for r in recs:
        cell.setdefault((r["task"], r["split"], r["method"]), []).append(r)
    lines = []
    for split in ("extrapolation", "interpolation"):
        lines.append(f"\n### {split}: median RMSE (95% coverage) over seeds, the lowest in "
                     f"bold\n")
        lines.append("| task | " + " | ".join(METHODS) + " | pcgp / best(skl, dkl) |")
        lines.append("|---" * (len(METHODS) + 2) + "|")
        for t in tasks:
            row, med = [], {}
            for m in METHODS:
                rs = cell.get((t, split, m), [])
                if not rs:
                    row.append("-")
                    continue
                med[m] = records.median([r["rmse"] for r in rs])
                row.append(f"{med[m]:.3g} ({records.median([r['coverage95'] for r in rs]):.2f})")
            best = min(med, key=med.get) if med else None
            row = [f"**{c}**" if m == best else c for m, c in zip(METHODS, row)]
            base = min(med.get("skl", math.inf), med.get("dkl", math.inf))
            ratio = med.get("pcgp", math.nan) / base if base < math.inf else math.nan
            lines.append(f"| {t} | " + " | ".join(row) + f" | {ratio:.2f} |")
    lines.append("\n### coefficients (pcgp): median relative error, 90% interval covers\n")
    lines.append("| task | split | estimates (median over seeds) | truth | rel. error | covered |")
    lines.append("|---|---|---|---|---|---|")
    for t in tasks:
        for split in ("extrapolation", "interpolation"):
            rs = cell.get((t, split, "pcgp"), [])
            if not rs or "params" not in rs[0]:
                continue
            from pyro_pidkl.datasets import problem
            truth = problem(t).truth
            est = {k: records.median([r["params"][k] for r in rs]) for k in rs[0]["params"]}
            err = records.median([e for r in rs for e in r["param_rel_error"].values()])
            cov = sum(c for r in rs for c in r["interval_covers"].values())
            tot = sum(len(r["interval_covers"]) for r in rs)
            lines.append(f"| {t} | {split} | " + ", ".join(f"{k} {v:.4g}" for k, v in est.items())
                         + " | " + ", ".join(f"{k} {truth[k]:g}" for k in est)
                         + f" | {err:.3f} | {cov}/{tot} |")
    lines.append("\n### targets\n")
    lines.extend(_targets(cell, tasks))
    if errors:
        lines.append(f"\n{len(errors)} fits failed:")
        lines.extend(f"- {r['task']} {r['split']} {r['method']} seed {r['seed']}: {r['error']}"
                     for r in errors)
    return "\n".join(lines)


def _problem_names():
    from pyro_pidkl.datasets import PROBLEMS
    return PROBLEMS


def _targets(cell, tasks):
    out = []
    ratios, wins, worse_dkl = [], 0, []
    for t in tasks:
        med = {m: records.median([r["rmse"] for r in cell.get((t, "extrapolation", m), [])])
               for m in ("skl", "dkl", "pcgp")}
        base = min(med["skl"], med["dkl"])
        ratio = med["pcgp"] / base
        ratios.append(ratio)
        wins += ratio < 1
        if med["pcgp"] > 1.1 * med["dkl"]:
            worse_dkl.append(t)
    n = len(tasks)
    out.append(f"- extrapolation: pcgp beats the better of DKL and SKL on {wins}/{n} tasks "
               f"({wins / max(n, 1):.0%}; target 80%), median ratio {records.median(ratios):.3f} "
               f"(target <= 0.5); worse than DKL by >10% on: {worse_dkl or 'none'}")
    errs = [e for (t, s, m), rs in cell.items() if m == "pcgp"
            for r in rs for e in r.get("param_rel_error", {}).values()]
    cov = [c for (t, s, m), rs in cell.items() if m == "pcgp"
           for r in rs for c in r.get("interval_covers", {}).values()]
    out.append(f"- coefficients: median relative error {records.median(errs):.3f} over "
               f"{len(errs)} estimates (target <= 0.10); 90% interval covers the truth in "
               f"{sum(cov)}/{len(cov)}")
    for split in ("extrapolation", "interpolation"):
        covs = [records.median([r["coverage95"] for r in cell.get((t, split, "pcgp"), [])])
                for t in tasks]
        crps_wins = sum(records.median([r["crps"] for r in cell.get((t, split, "pcgp"), [])])
                        < records.median([r["crps"] for r in cell.get((t, split, "skl"), [])])
                        for t in tasks)
        out.append(f"- {split}: median over tasks of pcgp's 95% coverage {records.median(covs):.2f} "
                   f"(target [0.85, 0.99]); CRPS better than SKL's on {crps_wins}/{len(tasks)}"
                   f" (target 80%)")
    fits = [r["fit_s"] for (t, s, m), rs in cell.items() if m == "pcgp" for r in rs]
    if fits:
        out.append(f"- pcgp fit time: median {records.median(fits):.1f} s, max {max(fits):.1f} s "
                   f"(1000 steps, one thread, 2 fits sharing 2 cores)")
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", default="all", help="comma-separated names, or all")
    p.add_argument("--splits", default="extrapolation,interpolation")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--force", action="store_true", help="redo fits already recorded")
    p.add_argument("--summary", action="store_true", help="print the tables and exit")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.steps < 1:
        p.error(f"expected --jobs >= 1 and --steps >= 1; got {args.jobs} and {args.steps}")
    if args.summary:
        print(summary(args.out, args.steps))
        return
    run(args)
    print(summary(args.out, args.steps))


if __name__ == "__main__":
    main()
