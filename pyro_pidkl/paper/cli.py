"""Command line.

* ``pidkl fit EXPERIMENT``: one fit per method at fixed settings; test scores.
* ``pidkl reproduce EXPERIMENT``: the honest protocol (CV on training data, several seeds,
  final iterate); a table, ``DIR/results.json`` and a figure.
* ``pidkl table DIR/results.json``: the README's markdown table from a results file.

The step-time benchmark is ``benchmarks/step_time.py``.
"""

import argparse
import json
import os
import sys

import pyro
import torch

from .. import __version__
from .experiments import EXPERIMENTS, RESTART_METHODS, build_model
from ..infer.svi import fit
from ..diagnostics.calibration import predictive_scores

__all__ = ["main"]


def _fit_command(args):
    experiment = EXPERIMENTS[args.experiment]
    data = experiment.dataset()
    steps = experiment.protocol.num_steps if args.steps is None else args.steps
    lr = experiment.protocol.lr if args.lr is None else args.lr
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{experiment.description}\n{data}", file=sys.stderr)
    rows = []
    methods = [m.strip() for m in args.methods.split(",")]
    restarts = [m for m in methods if m in RESTART_METHODS]
    if restarts:
        raise SystemExit(f"pidkl fit runs one fit per method; {restarts} fit several restarts: "
                         f"run `pidkl reproduce {experiment.name} --methods "
                         f"{','.join(restarts)}`")
    for method in methods:
        pyro.set_rng_seed(args.seed)
        model = build_model(method, experiment, data.X_train, data.y_train,
                            data.input_names, gamma=args.gamma, m=args.m)
        result = fit(model, num_steps=steps, lr=lr, num_particles=args.particles,
                     progress=not args.quiet)
        mean, var_y = model(data.X_test, noiseless=False)
        scores = predictive_scores(mean, var_y, data.y_test)
        row = {"experiment": experiment.name, "method": method, "seed": args.seed,
               "steps": steps, "lr": lr, "rmse": scores["rmse"], "nrmse": scores["nrmse"],
               "test_lpd": scores["test_lpd"], "coverage95": scores["coverage"][0.95],
               "fit_seconds": result.seconds, "final_loss": result.final_loss}
        if method == "pidkl":
            row.update(gamma=model.physics.gamma, m=model.physics.m, initial=experiment.initial,
                       learned=model.equation_parameters(), truth=data.truth)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'method':<7} {'rmse':>8} {'nrmse':>8} {'test_lpd':>9} {'cov95':>6} {'seconds':>8}")
    for r in rows:
        print(f"{r['method']:<7} {r['rmse']:8.4f} {r['nrmse']:8.4f} {r['test_lpd']:9.3f} "
              f"{r['coverage95']:6.3f} {r['fit_seconds']:8.1f}")
    for r in rows:
        if "learned" in r:
            learned = ", ".join(f"{k}={v:.4g}" for k, v in r["learned"].items())
            print(f"{r['method']}: gamma={r['gamma']}, m={r['m']}; equation parameters "
                  f"learned {learned} (started at {r['initial']}, truth {r['truth']})")
    return 0


def _parse_seeds(text):
    seeds = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            seeds.extend(range(int(a), int(b) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


def _reproduce_command(args):
    from .reproduce import format_table, reproduce

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.data:
        env = EXPERIMENTS[args.experiment].data_env
        if env is None:
            raise SystemExit(f"pidkl reproduce {args.experiment}: --data is for real-data "
                             f"experiments; {args.experiment!r} generates its own data")
        os.environ[env] = args.data  # read by the loader, here and in worker processes
    methods = args.methods.split(",") if args.methods else None
    records = reproduce(args.experiment, methods, _parse_seeds(args.seeds) if args.seeds else None,
                        args.steps, args.out, args.jobs, progress=not args.quiet,
                        cv_score=args.cv_score)
    print(format_table(records))
    print(f"records: {args.out}/results.json; figure: {args.out}/{args.experiment}.png")
    return 0


def _table_command(args):
    from pathlib import Path

    from .reproduce import calibration_markdown, markdown_table

    records = json.loads(Path(args.results).read_text())
    print(markdown_table(records))
    if any("coverage" in r for r in records):
        print()
        print(calibration_markdown(records))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="pidkl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"pyro_pidkl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("fit", help="fit models on a built-in example and print test scores")
    p.add_argument("experiment", choices=sorted(EXPERIMENTS))
    p.add_argument("--methods", default="pidkl,dkl",
                   help="comma-separated methods among pidkl, dkl, skl (default pidkl,dkl)")
    p.add_argument("--steps", type=int, default=None, help="optimisation steps")
    p.add_argument("--lr", type=float, default=None, help="Adam learning rate")
    p.add_argument("--gamma", type=float, default=1.0, help="weight of the physics term (default 1)")
    p.add_argument("--m", type=int, default=10, help="collocation points per step (default 10)")
    p.add_argument("--particles", type=int, default=1, help="particles for Z and eps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    epilog = "experiments and their methods (* default):\n" + "\n".join(
        f"  {name:<10} " + ", ".join(m + ("*" if m in e.default_methods else "")
                                     for m in e.methods)
        for name, e in EXPERIMENTS.items())
    r = sub.add_parser("reproduce", help="the paper's experiment, honest protocol, several seeds",
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("experiment", choices=sorted(EXPERIMENTS))
    r.add_argument("--methods", default=None, help="comma-separated (default: the "
                   "experiment's default methods; 'lfm' stands for all its latent force models)")
    r.add_argument("--seeds", default=None, help="e.g. 0-4 or 0,2,5 (default 0-4)")
    r.add_argument("--steps", type=int, default=None, help="steps per fit (default: protocol)")
    r.add_argument("--out", default="runs", help="output folder (default runs/)")
    r.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="processes (default: 2, or 1 on a single core)")
    r.add_argument("--threads", type=int, default=0, help="torch threads when --jobs 1")
    r.add_argument("--data", default=None, help="real-data experiments: the data file or "
                   "folder (default: $PIDKL_JURA / $PIDKL_PM25, then the usual places)")
    r.add_argument("--cv-score", choices=("rmse", "lpd"), default=None,
                   help="what PI-DKL's cross-validation maximises on the validation points "
                        "(default: the experiment's protocol, rmse)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    t = sub.add_parser("table", help="markdown table from a results.json")
    t.add_argument("results")
    args = parser.parse_args(argv)
    commands = {"fit": _fit_command, "reproduce": _reproduce_command, "table": _table_command}
    return commands[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
