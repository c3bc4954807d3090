"""Many subjects, one law (issue 65): the theophylline population beside R's nlme (its own
process, if ``Rscript`` with nlme is present; else the reference recorded in the data's
README), the library's NUTS beside NumPyro's (``PIDKL_PEER_PYTHON``) in the same run, and
the calibration of the population parameters' 90% intervals on simulated populations from
three laws (one-compartment oral absorption, two-compartment oral
absorption, logistic growth; 10-40 subjects, 4-6 samples each, 10-30% log-normal noise).

    python benchmarks/population.py theophylline
    python benchmarks/population.py calibration --datasets 0-39 [--families ...]
    python benchmarks/population.py summary
    python benchmarks/population.py threads      # the theophylline fit on 1 and 2 threads

Records: ``docs/results/population_calibration_exact.jsonl`` (one per dataset, resumable;
``population_calibration.jsonl`` the same before affine laws were solved exactly) and
``docs/results/population_theophylline.jsonl``.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

import pyro_pidkl as pk  # noqa: E402
from pyro_pidkl.population import (GroupedData, PopulationODE, Random, Shared,  # noqa: E402
                                   fit_population, sample_population, simulate_population)

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "..", "docs", "results")
#: nlme 3.1.162 on R 4.2.2, as recorded (``pk.datasets.NLME_REFERENCE``)
NLME_RECORDED = dict(pk.datasets.NLME_REFERENCE, version="recorded (R 4.2.2, nlme 3.1.162)")


def oral(f, x, ka, ke, cl):
    """One compartment, first-order absorption: the gut A, the serum concentration C."""
    A, C = f["A"], f["C"]
    return (A.d("t") + ka * A, C.d("t") - ka * ke / cl * A + ke * C)


def two_compartment(f, x, ka, k10, k12, k21, V):
    """Two compartments, first-order absorption: gut A, central C, peripheral P (both as
    concentrations in the central volume)."""
    A, C, P = f["A"], f["C"], f["P"]
    return (A.d("t") + ka * A, C.d("t") - ka * A / V + (k10 + k12) * C - k21 * P,
            P.d("t") - k12 * C + k21 * P)


def logistic(f, x, r, K):
    return (f["f"].d("t") - r * f["f"] * (1 - f["f"] / K),)


def theophylline_model():
    """The textbook population model of the theophylline data (nlme's, written as a law)."""
    system = pk.EquationSystem(oral, outputs=("A", "C"), inputs=("t",), ka=1.5, ke=0.1,
                               cl=0.04)
    data = GroupedData.from_frame(pk.datasets.theophylline(), group="Subject", time="Time",
                                  observe={"C": "conc"}, covariates=("Dose", "Wt"))
    return PopulationODE(system, data, initial={"A": "Dose", "C": 0.0},
                         effects={"ka": Random(1.5), "ke": Shared(0.1), "cl": Random(0.04)})


def theophylline_csv(path):
    """The library's copy of the data written as R's CSV (for the peers)."""
    cols = pk.datasets.theophylline()
    with open(path, "w") as fh:
        fh.write('"Subject","Wt","Dose","Time","conc"\n')
        for row in zip(*cols.values()):
            fh.write(",".join([f'"{row[0]}"'] + [repr(float(v)) for v in row[1:]]) + "\n")
    return path


def run_nlme(path):
    """nlme in its own process (``peers/nlme_theophylline.R``), or the recorded reference."""
    if shutil.which("Rscript"):
        done = subprocess.run(["Rscript", os.path.join(HERE, "peers", "nlme_theophylline.R"),
                               path], capture_output=True, text=True)
        if done.returncode == 0:
            return json.loads(done.stdout.strip().splitlines()[-1])
    return dict(NLME_RECORDED)


def theophylline():
    records.set_threads(1)
    import tempfile
    csv_path = theophylline_csv(os.path.join(tempfile.mkdtemp(), "theophylline.csv"))
    ref = run_nlme(csv_path)
    pop = theophylline_model()
    fit = fit_population(pop)
    fe, sd = fit.fixed_effects, fit.random_sd
    ours = {"lKe": fe["ke"], "lKa": fe["ka"], "lCl": fe["cl"], "sd_lKa": sd["ka"],
            "sd_lCl": sd["cl"], "sigma": float(fit.sigma[0]), "loglik": fit.loglik,
            "cpu_seconds": fit.cpu_seconds}
    flip = len(fit.branches["groups"])
    print(f"theophylline, one torch thread, {platform.processor() or platform.machine()}")
    print(f"{'':10s}{'pyro_pidkl':>12s}{'nlme':>12s}{'diff':>10s}")
    for k in ("lKe", "lKa", "lCl", "sd_lKa", "sd_lCl", "sigma", "loglik", "cpu_seconds"):
        a, b = ours[k], ref.get(k, float("nan"))
        print(f"{k:10s}{a:12.4f}{b:12.4f}{a - b:10.4f}")
    fixed_ok = max(abs(ours[k] - ref[k]) for k in ("lKe", "lKa", "lCl"))
    sd_ok = max(abs(ours[k] / ref[k] - 1) for k in ("sd_lKa", "sd_lCl"))
    print(f"target fixed effects within 0.05 of nlme (log): {fixed_ok:.4f} "
          f"{'met' if fixed_ok <= 0.05 else 'MISSED'}")
    print(f"target random-effect sds within 25%: {sd_ok:.2%} {'met' if sd_ok <= 0.25 else 'MISSED'}")
    print(f"target Laplace fit at most 30 CPU s (branches included): {fit.cpu_seconds:.1f} "
          f"{'met' if fit.cpu_seconds <= 30 else 'MISSED'}")
    # NUTS over everything (Pyro's, on pop.model, from the Laplace fit), 2 x (1000 + 1000)
    draws = sample_population(pop, fit, num_warmup=1000, num_samples=1000, num_chains=2,
                              progress=False)
    names = {"lKe": "ke", "lKa": "ka", "lCl": "cl", "sd_lKa": "sd(ka)", "sd_lCl": "sd(cl)",
             "sigma": "sigma(C)"}
    summary = draws.summary()
    mine = {k: {"mean": summary[v]["mean"], "sd": summary[v]["sd"], "r_hat": summary[v]["r_hat"],
                "n_eff": summary[v]["n_eff"]} for k, v in names.items()}
    mine.update(cpu_seconds=draws.cpu_seconds, divergences=draws.divergences)
    print(f"pyro_pidkl NUTS (sample_population, 2 x (1000 + 1000), {draws.cpu_seconds:.1f} "
          f"CPU s, divergences {draws.divergences}, max R-hat "
          f"{max(v['r_hat'] for v in mine.values() if isinstance(v, dict)):.4f})")
    peer = os.environ.get("PIDKL_PEER_PYTHON")
    nuts = None
    if peer:
        nuts = records.call_peer(peer, {"csv": csv_path, "warmup": 1000,
                                        "samples": 1000, "chains": 2},
                                 peer="numpyro_population.py")
        print(f"NumPyro hierarchical NUTS ({nuts.get('version')}, 2 x (1000 + 1000), "
              f"{nuts.get('cpu_seconds', float('nan')):.1f} CPU s, divergences "
              f"{nuts.get('divergences')}): posterior mean (sd)")
        worst = 0.0
        for k in ("lKe", "lKa", "lCl", "sd_lKa", "sd_lCl", "sigma"):
            if k in nuts:
                m, sdv = nuts[k]["mean"], nuts[k]["sd"]
                gap = (mine[k]["mean"] - m) / sdv
                worst = max(worst, abs(gap))
                print(f"  {k:8s} NumPyro {m:8.4f} ({sdv:.4f})   pyro_pidkl {mine[k]['mean']:8.4f} "
                      f"({mine[k]['sd']:.4f}) {gap:+.2f} sd   Laplace {ours[k]:8.4f} "
                      f"{(ours[k] - m) / sdv:+.2f} sd")
        ratio = draws.cpu_seconds / nuts["cpu_seconds"]
        print(f"target pyro_pidkl NUTS means within one posterior sd of NumPyro's: largest "
              f"{worst:.2f} sd {'met' if worst <= 1 else 'MISSED'}; at most 3x its time: "
              f"{ratio:.1f}x {'met' if ratio <= 3 else 'MISSED'}")
    else:
        print("NumPyro left out: set PIDKL_PEER_PYTHON to an interpreter with numpyro and jax")
    print(f"flip-flop (two coefficient sets, one curve; every subject has it by the law's "
          f"symmetry): reported for {flip} of 12")
    print("\n".join(fit.branches["lines"]))
    rec = {"ours": ours, "nlme": ref, "numpyro": nuts, "pyro_pidkl_nuts": mine,
           "flip_flop_reported": flip,
           "branches": fit.branches["lines"], "threads": 1, "commit": records.commit(),
           "processor": platform.processor() or platform.machine()}
    with open(os.path.join(RESULTS, "population_theophylline.jsonl"), "a") as fh:
        records.append(fh, rec)


# -- simulated populations -------------------------------------------------------------------
def family(name):
    """``(system, times, initial, effects, sd, covariates(groups, rng))`` of a law; the
    effects' starting values are the truth."""
    if name == "one_compartment":
        system = pk.EquationSystem(oral, outputs=("A", "C"), inputs=("t",), ka=1.0, ke=0.1,
                                   cl=0.05)
        return (system, np.array([0.5, 1.5, 4.0, 9.0, 24.0]), {"A": "Dose", "C": 0.0},
                {"ka": Random(1.2, sd=0.4), "ke": Shared(0.09), "cl": Random(0.04, sd=0.25)},
                {"ka": 0.4, "cl": 0.25}, ("C",))
    if name == "two_compartment":
        system = pk.EquationSystem(two_compartment, outputs=("A", "C", "P"), inputs=("t",),
                                   ka=1.0, k10=0.2, k12=0.3, k21=0.15, V=0.5)
        return (system, np.array([0.5, 1.0, 2.0, 4.0, 8.0, 24.0]),
                {"A": "Dose", "C": 0.0, "P": 0.0},
                {"ka": Random(1.5, sd=0.3), "k10": Shared(0.25), "k12": Shared(0.4),
                 "k21": Shared(0.15), "V": Random(0.5, sd=0.2)},
                {"ka": 0.3, "V": 0.2}, ("C",))
    if name == "logistic":
        system = pk.EquationSystem(logistic, outputs=("f",), inputs=("t",), r=0.5, K=10.0)
        return (system, np.array([1.0, 3.0, 5.0, 8.0, 12.0]), {"f": 0.5},
                {"r": Random(0.6, sd=0.2), "K": Random(10.0, sd=0.15)},
                {"r": 0.2, "K": 0.15}, ("f",))
    raise KeyError(name)


FAMILIES = ("one_compartment", "two_compartment", "logistic")


def one_dataset(name, seed):
    system, times, initial, effects, sd, observe = family(name)
    rng = np.random.default_rng(1000 + seed)
    G = int(rng.integers(10, 41))
    sigma = float(rng.uniform(0.1, 0.3))
    cov = {"Dose": rng.uniform(3.0, 6.0, G)} if "A" in initial else None
    data, truth = simulate_population(system, times, initial, effects, sd, sigma, groups=G,
                                      noise="log", covariates=cov, jitter=0.3, seed=seed,
                                      observe=observe)
    # the fit starts away from the truth: every value doubled, sds at 0.3
    start = {k: (Random(2 * e.init, sd=0.3) if isinstance(e, Random) else Shared(2 * e.init))
             for k, e in effects.items()}
    pop = PopulationODE(system, data, initial, start, noise="log")
    began = time.process_time()
    try:
        fit = fit_population(pop, branches=False)
    except Exception as e:                                     # noqa: BLE001
        return {"groups": G, "sigma": sigma, "error": f"{type(e).__name__}: {e}"[:300]}
    iv = fit.intervals(0.9)
    out = {"groups": G, "sigma": sigma, "cpu_seconds": time.process_time() - began,
           "converged": fit.converged, "steps": fit.steps, "params": {}}
    truths = dict(truth["beta"])
    truths.update({f"sd({k})": v for k, v in sd.items()})
    truths[f"sigma({observe[0]})"] = sigma
    for name_, t in truths.items():
        r = iv[name_]
        lo, hi = r["log"][1], r["log"][2]
        tt = float(np.log(t)) if name_.startswith(("sd(", "sigma(")) else float(t)
        out["params"][name_] = {"truth": tt, "value": r["log"][0], "lower": lo, "upper": hi,
                                "covered": bool(lo <= tt <= hi), "width": hi - lo,
                                "z": (r["log"][0] - tt) / max((hi - lo) / (2 * 1.6449), 1e-300)}
    return out


CALIBRATION = os.path.join(RESULTS, "population_calibration_exact.jsonl")


def calibration(seeds, families, path=CALIBRATION):
    jobs = [({"family": f, "seed": s}, (lambda f=f, s=s: one_dataset(f, s)))
            for f in families for s in seeds]
    records.run_jobs(path, jobs, key=lambda r: (r["family"], r["seed"]))


def summary(path=CALIBRATION):
    recs = records.read_records(path)
    print("simulated populations: 90% intervals of the population parameters (log scale)")
    print(f"{'family':18s}{'parameter':12s}{'datasets':>9s}{'coverage':>10s}{'width':>9s}"
          f"{'|z|>3':>7s}")
    for f in FAMILIES:
        rs = [r for r in recs if r["family"] == f and "params" in r]
        failed = sum(1 for r in recs if r["family"] == f and "error" in r)
        if not rs:
            continue
        for p in rs[0]["params"]:
            cov = [r["params"][p]["covered"] for r in rs]
            w = [r["params"][p]["width"] for r in rs]
            bad = sum(abs(r["params"][p]["z"]) > 3 for r in rs)
            print(f"{f:18s}{p:12s}{len(rs):9d}{np.mean(cov):10.2f}{np.median(w):9.3f}{bad:7d}")
        cpu = [r["cpu_seconds"] for r in rs]
        print(f"{f:18s}{'(fits)':12s}{len(rs):9d}  median {np.median(cpu):.1f} CPU s "
              f"[{min(cpu):.1f}, {max(cpu):.1f}], failed {failed}")
        cover = [np.mean([r["params"][p]["covered"] for r in rs]) for p in rs[0]["params"]]
        misses = sum(abs(r["params"][p]["z"]) > 3 for r in rs for p in r["params"])
        ok = 0.85 <= min(cover) and max(cover) <= 0.95 and misses == 0 and failed == 0
        print(f"target {f}: coverage in 85-95% ({min(cover):.2f}-{max(cover):.2f}), no "
              f"confident miss ({misses}), no failed fit ({failed}): "
              f"{'met' if ok else 'MISSED'}")


def threads():
    """The theophylline fit at ``threads=1`` (the default) and at torch's two threads, one
    after the other in this process: CPU and wall seconds of each (nothing recorded)."""
    torch.set_num_threads(2)
    for n in (1, 2):
        pop = theophylline_model()
        cpu, wall = time.process_time(), time.perf_counter()
        fit = fit_population(pop, threads=n)
        print(f"threads {n}: {time.process_time() - cpu:.1f} CPU s, "
              f"{time.perf_counter() - wall:.1f} s wall, log-likelihood {fit.loglik:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("theophylline", "calibration", "summary", "threads"))
    ap.add_argument("--datasets", default="0-39")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--records", default=CALIBRATION,
                    help="the calibration's records (population_calibration.jsonl: the "
                         "Runge-Kutta integrator's, before affine laws were solved exactly)")
    args = ap.parse_args()
    if args.what == "theophylline":
        theophylline()
    elif args.what == "threads":
        threads()
    elif args.what == "calibration":
        calibration(records.seeds(args.datasets), args.families.split(","), args.records)
        summary(args.records)
    else:
        summary(args.records)


if __name__ == "__main__":
    torch.set_default_dtype(torch.float64)
    main()
