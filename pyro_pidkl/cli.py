"""Command line: ``pidkl fit EXPERIMENT`` fits a model on a built-in example and prints its
test scores and learned equation parameters."""

import argparse
import json
import sys

import pyro
import torch

from . import __version__
from .experiments import EXPERIMENTS, build_model
from .infer import fit
from .metrics import coverage, nrmse, rmse, test_log_predictive_density

__all__ = ["main"]


def _fit_command(args):
    experiment = EXPERIMENTS[args.experiment]
    data = experiment.dataset()
    steps = experiment.num_steps if args.steps is None else args.steps
    lr = experiment.lr if args.lr is None else args.lr
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{experiment.description}\n{data}", file=sys.stderr)
    rows = []
    for method in args.methods.split(","):
        pyro.set_rng_seed(args.seed)
        model = build_model(method.strip(), experiment, data.X_train, data.y_train,
                            data.input_names, gamma=args.gamma, m=args.m)
        result = fit(model, num_steps=steps, lr=lr, num_particles=args.particles,
                     progress=not args.quiet)
        mean, var_f = model(data.X_test)
        _, var_y = model(data.X_test, noiseless=False)
        row = {"experiment": experiment.name, "method": method, "seed": args.seed,
               "steps": steps, "lr": lr,
               "rmse": rmse(mean, data.y_test), "nrmse": nrmse(mean, data.y_test),
               "test_lpd": test_log_predictive_density(mean, var_y, data.y_test),
               "coverage95": coverage(mean, var_y, data.y_test, 0.95),
               "fit_seconds": result.seconds, "final_loss": result.final_loss}
        if method == "pidkl":
            row.update(gamma=model.gamma, m=model.m, initial=experiment.initial,
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
    p.add_argument("--gamma", type=float, default=None, help="weight of the physics term")
    p.add_argument("--m", type=int, default=None, help="collocation points per step")
    p.add_argument("--particles", type=int, default=1, help="particles for Z and eps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.command == "fit":
        return _fit_command(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
