"""How long NUTS takes on the conditioned GP, and how it mixes: the README's oscillator (one
output, 40 data) and a two-output system (the calibration benchmark's reaction chain,
dataset 0: 20 data per output), two chains of 500 warm-up + 500 draws on one torch thread,
in three settings:

* ``full``: the coefficients and the GP's identified parameters drawn, all collocation
  points (``pk.infer.sample_coefficients``' defaults);
* ``held``: the GP's parameters held at the fit (``hyperparameters=False``);
* ``held-subset``: held, and the chains on 50 collocation points, corrected to all of them
  by importance weights (``collocation=50``).

Each row: seconds (sampling alone; the fit and the Laplace intervals beside it), the largest
split R-hat and the smallest effective size over the parameters drawn, divergences, the
importance weights' k-hat, and the coefficients' 90% intervals.

    python benchmarks/sampler_speed.py                       # records docs/results/sampler_speed.jsonl
    python benchmarks/sampler_speed.py --cases system --settings held,held-subset
"""

import argparse
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "..", "docs", "results",
                           "sampler_speed.jsonl")
SETTINGS = {"full": {}, "held": {"hyperparameters": False},
            "held-subset": {"hyperparameters": False, "collocation": 50}}


def oscillator():
    """The README's own-equation block: its model, fitted."""
    from torch.distributions import constraints
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter

    def damped_oscillator(f, x, omega, zeta):
        return f.d("t", "t") + 2 * zeta * omega * f.d("t") + omega ** 2 * f
    eq = Equation(damped_oscillator, inputs=("t",), omega=Parameter(1.0),
                  zeta=Parameter(0.5, constraints.unit_interval))
    data = pk.datasets.problem("oscillator").sample("extrapolation", seed=0)
    return pk.PhysicsConditionedGP(data.X_train, data.y_train, eq, domain=pk.Box(t=(0.0, 6.0)))


def system():
    """The calibration benchmark's two-output chain, dataset 0."""
    import calibration
    family = calibration.families()["chain"]
    _, data = family.draw(0)
    return family.build(data)


CASES = {"oscillator": oscillator, "system": system}


def run(case, setting, warmup, draws, chains):
    import torch
    import pyro_pidkl as pk
    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = CASES[case]()
        t0 = time.perf_counter()
        pk.fit(model, progress=False, seed=0)
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        laplace = model.coefficient_intervals(0.9)
        laplace_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = pk.infer.sample_coefficients(model, num_warmup=warmup, num_samples=draws,
                                     num_chains=chains, progress=False, **SETTINGS[setting])
        seconds = time.perf_counter() - t0
    summary = out.summary(0.9)
    return {"case": case, "setting": setting, "warmup": warmup, "draws": draws,
            "chains": chains, "seconds": round(seconds, 1), "fit_s": round(fit_s, 2),
            "laplace_s": round(laplace_s, 2),
            "r_hat_max": max(v["r_hat"] for v in summary.values()),
            "n_eff_min": min(v["n_eff"] for v in summary.values()),
            "divergences": sum(len(v) for v in out.diagnostics["divergences"].values()),
            "khat": out.diagnostics.get("khat"), "excess": out.diagnostics.get("excess"),
            "coefficients": {n: [summary[n]["lower"], summary[n]["upper"]]
                             for n in out.coefficients},
            "laplace": {n: [v["lower"], v["upper"]] for n, v in laplace.items()},
            "threads": 1, "commit": records.commit()}


def summary(path):
    recs = records.latest(records.read_records(path),
                          lambda r: (r["case"], r["setting"], r["warmup"], r["draws"]))
    lines = ["| case | setting | chains x (warm-up + draws) | seconds | R-hat (max) | "
             "effective size (min) | divergences | k-hat (excess nats) | 90% intervals (NUTS; Laplace) | "
             "commit |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs.values():
        iv = "; ".join(f"{n} [{a:.4g}, {b:.4g}] ([{r['laplace'][n][0]:.4g}, "
                       f"{r['laplace'][n][1]:.4g}])" for n, (a, b) in r["coefficients"].items())
        kh = f"{r['khat']:.2f}" if r.get("khat") is not None else "-"
        if r.get("excess") is not None:
            kh += f" (excess {r['excess']:.0f})"
        lines.append(f"| {r['case']} | {r['setting']} | {r['chains']} x ({r['warmup']} + "
                     f"{r['draws']}) | {r['seconds']:.0f} | {r['r_hat_max']:.3f} | "
                     f"{r['n_eff_min']:.0f} | {r['divergences']} | {kh} | {iv} | "
                     f"{r['commit']} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT)
    p.add_argument("--cases", default="oscillator,system")
    p.add_argument("--settings", default="full,held,held-subset")
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--draws", type=int, default=500)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--summary", action="store_true")
    args = p.parse_args(argv)
    if not args.summary:
        with open(args.out, "a") as fh:
            for case in args.cases.split(","):
                for setting in args.settings.split(","):
                    rec = run(case, setting, args.warmup, args.draws, args.chains)
                    records.append(fh, rec)
                    print(f"{case} {setting}: {rec['seconds']:.0f} s, R-hat {rec['r_hat_max']:.3f}, "
                          f"n_eff {rec['n_eff_min']:.0f}, k-hat {rec['khat']}", flush=True)
    print(summary(args.out))


if __name__ == "__main__":
    main()
