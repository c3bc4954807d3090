"""Command line.

* ``pidkl fit EXPERIMENT``: one fit per method at fixed settings; test scores.
* ``pidkl reproduce EXPERIMENT``: the honest protocol (CV on training data, several seeds,
  final iterate); a table, ``DIR/results.json`` and figures. Interrupted runs keep every
  finished fit; a rerun into the same folder skips them (``--force`` redoes them).
* ``pidkl table DIR/results.json``: the markdown table from a results file.

The step-time benchmark is ``benchmarks/step_time.py``. This module imports torch only once
its arguments are checked, so that ``--help`` and argument errors are immediate.
"""

import argparse
import json
import os
import sys

from .catalogue import CATALOGUE

__all__ = ["main"]


def _seeds(text):
    """``0-4``, ``0,2,5`` or ``0-2,7`` as a list of distinct seeds >= 0."""
    seeds = []
    try:
        for part in text.split(","):
            if "-" in part:
                a, b = part.split("-")
                a, b = int(a), int(b)
                if b < a:
                    raise ValueError
                seeds.extend(range(a, b + 1))
            else:
                seeds.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seeds like 0-4, 0,2,5 or 0-2,7 (integers >= 0, ranges low-high); "
            f"got {text!r}") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"expected distinct seeds >= 0; got {text!r}")
    return seeds


def _count(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}; got {text!r}")
        return value
    return parse


def _non_negative(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0; got {text!r}")
    return value


def _methods(experiment, text, parser):
    methods = [m.strip() for m in text.split(",") if m.strip()]
    known = CATALOGUE[experiment][0]
    unknown = [m for m in methods if m not in known and m != "lfm"]
    if not methods or unknown:
        parser.error(f"expected methods of {experiment!r} among {', '.join(known)} (or lfm); "
                     f"got {text!r}")
    return methods


def _threads(n):
    if n:
        import torch
        torch.set_num_threads(n)


def _fit_command(args, parser):
    methods = _methods(args.experiment, args.methods, parser)
    from .experiments import EXPERIMENTS, RESTART_METHODS

    restarts = [m for m in methods if m in RESTART_METHODS]
    if restarts:
        parser.error(f"pidkl fit runs one fit per method; {restarts} fit several restarts: "
                     f"run `pidkl reproduce {args.experiment} --methods {','.join(restarts)}`")
    import pyro

    from ..diagnostics.calibration import predictive_scores
    from ..infer.svi import fit
    from .experiments import build_model

    experiment = EXPERIMENTS[args.experiment]
    data = experiment.dataset()
    steps = experiment.protocol.num_steps if args.steps is None else args.steps
    lr = experiment.protocol.lr if args.lr is None else args.lr
    _threads(args.threads)
    print(f"{experiment.description}\n{data}", file=sys.stderr)
    rows = []
    for method in methods:
        pyro.set_rng_seed(args.seed)
        model = build_model(method, experiment, data.X_train, data.y_train,
                            data.input_names, gamma=args.gamma, m=args.m)
        result = fit(model, num_steps=steps, lr=lr, num_particles=args.particles,
                     progress=not args.quiet,
                     method="auto" if method.startswith("pcgp") else "adam")
        mean, var_y = model(data.X_test, noiseless=False)
        scores = predictive_scores(mean, var_y, data.y_test)
        row = {"experiment": experiment.name, "method": method, "seed": args.seed,
               "steps": steps, "lr": lr, "rmse": scores["rmse"], "nrmse": scores["nrmse"],
               "test_lpd": scores["test_lpd"], "coverage95": scores["coverage"][0.95],
               "fit_seconds": result.seconds, "final_loss": result.final_loss}
        if getattr(model, "physics", None) is not None:
            row.update(gamma=model.physics.gamma, m=model.physics.m,
                       initial=experiment.initial, learned=model.equation_parameters(),
                       truth=data.truth)
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


def _reproduce_command(args, parser):
    methods = _methods(args.experiment, args.methods, parser) if args.methods else None
    env = CATALOGUE[args.experiment][2]
    if args.data:
        if env is None:
            parser.error(f"--data is for real-data experiments; {args.experiment!r} generates "
                         f"its own data")
        if not os.path.exists(args.data):
            parser.error(f"--data {args.data}: no such file or folder")
        os.environ[env] = args.data  # read by the loader, here and in worker processes
    if args.jobs == 1:
        _threads(args.threads)
    from .reproduce import format_table, reproduce

    try:
        records = reproduce(args.experiment, methods, args.seeds, args.steps, args.out,
                            args.jobs, progress=not args.quiet, cv_score=args.cv_score,
                            force=args.force, echo=lambda m: print(m, file=sys.stderr))
    except KeyboardInterrupt:
        print(f"pidkl reproduce: interrupted; every finished fit is in "
              f"{args.out}/results.json (rerun the same command to go on)", file=sys.stderr)
        return 130
    print(format_table(records))
    print(f"records: {args.out}/results.json; figures: {args.out}/{args.experiment}*.png")
    return 0


def _table_command(args, parser):
    if not os.path.isfile(args.results):
        parser.error(f"expected a results.json written by pidkl reproduce; {args.results} is "
                     f"not a file")
    try:
        records = json.loads(open(args.results).read())
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ValueError("not a list of records")
    except ValueError as e:
        parser.error(f"expected a results.json written by pidkl reproduce; {args.results} "
                     f"cannot be read ({e})")
    from .reproduce import calibration_markdown, markdown_table

    print(markdown_table(records))
    if any("coverage" in r for r in records):
        print()
        print(calibration_markdown(records))
    return 0


def build_parser():
    parser = argparse.ArgumentParser(prog="pidkl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"pyro_pidkl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    names = sorted(CATALOGUE)
    p = sub.add_parser("fit", help="fit models on a built-in example and print test scores")
    p.add_argument("experiment", choices=names)
    p.add_argument("--methods", default="pidkl,dkl",
                   help="comma-separated methods among pidkl, dkl, skl (default pidkl,dkl)")
    p.add_argument("--steps", type=_count(0), default=None, help="optimisation steps")
    p.add_argument("--lr", type=_non_negative, default=None, help="Adam learning rate")
    p.add_argument("--gamma", type=_non_negative, default=1.0,
                   help="weight of the physics term (default 1)")
    p.add_argument("--m", type=_count(1), default=10,
                   help="collocation points per step (default 10)")
    p.add_argument("--particles", type=_count(1), default=1, help="particles for Z and eps")
    p.add_argument("--seed", type=_count(0), default=0)
    p.add_argument("--threads", type=_count(0), default=0, help="torch threads (0: default)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    epilog = "experiments and their methods (* default):\n" + "\n".join(
        f"  {name:<13} " + ", ".join(m + ("*" if m in defaults else "") for m in methods)
        for name, (methods, defaults, _) in CATALOGUE.items())
    r = sub.add_parser("reproduce", help="the paper's experiment, honest protocol, several seeds",
                       epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("experiment", choices=names)
    r.add_argument("--methods", default=None, help="comma-separated (default: the "
                   "experiment's default methods; 'lfm' stands for all its latent force models)")
    r.add_argument("--seeds", type=_seeds, default=None,
                   help="e.g. 0-4 or 0,2,5 (default 0-4)")
    r.add_argument("--steps", type=_count(1), default=None,
                   help="steps per fit (default: the protocol's; others are marked * in tables "
                        "and figures)")
    r.add_argument("--out", default="runs", help="output folder (default runs/)")
    r.add_argument("--jobs", type=_count(1), default=min(2, os.cpu_count() or 1),
                   help="worker processes of one torch thread each (default: 2, or 1 on a "
                        "single core)")
    r.add_argument("--threads", type=_count(0), default=0,
                   help="torch threads with --jobs 1 (0: torch's default)")
    r.add_argument("--data", default=None, help="real-data experiments: the data file or "
                   "folder (default: $PIDKL_JURA / $PIDKL_PM25 / $PIDKL_MOCAP, then the usual "
                   "places)")
    r.add_argument("--cv-score", choices=("rmse", "lpd"), default=None,
                   help="what PI-DKL's cross-validation maximises on the validation points "
                        "(default: the experiment's protocol, rmse)")
    r.add_argument("--force", action="store_true",
                   help="redo fits already recorded in --out (default: resume, skipping them)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    t = sub.add_parser("table", help="markdown table from a results.json")
    t.add_argument("results")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    commands = {"fit": _fit_command, "reproduce": _reproduce_command, "table": _table_command}
    sub = parser._subparsers._group_actions[0].choices[args.command]
    try:
        return commands[args.command](args, sub)
    except (ValueError, TypeError, FileNotFoundError) as e:
        from ..errors import PIDKLError

        if isinstance(e, PIDKLError) or type(e) in (ValueError, TypeError, FileNotFoundError):
            print(f"pidkl {args.command}: error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
