"""The ``pidkl`` command: fits from files, the built-in examples, the paper's experiments.

Commands: ``fit`` (a model of your equation on your CSV data, or the methods of a built-in
example), ``reproduce`` (a paper experiment under the honest protocol, resumable) and
``table``. This module imports torch only once its arguments are checked, so that ``--help``
and argument errors are immediate.
"""

DESCRIPTION = """\
Physics-informed Gaussian processes from the command line.

  pidkl fit --data obs.csv --equation eq.py --domain t=0:6 --grid 200
        your data and your equation: the physics-conditioned GP (default) or PI-DKL;
        learned coefficients with 95% intervals, predictions to a CSV file
  pidkl fit ode --methods pcgp,pidkl,dkl
        a built-in example, one fit per method, test scores
  pidkl reproduce ode --out runs
        a paper experiment, honest protocol, seeds 0-4; resumes when interrupted
  pidkl table runs/results.json
        the markdown table of a reproduce run

Fits use one torch thread for problems up to 8000 rows (data plus collocation points),
which is as fast as two on a quiet two-core machine and 2-3x faster on a busy one;
--threads N (or PIDKL_THREADS=N) sets another count. 'pidkl COMMAND --help' for options.
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


#: the paper's study tasks that tuned the protocol (docs/paper.md), accepted but not listed
DEVELOPMENT = ("ode-dev", "ode-dev2", "diffusion-dev")


def _threads(n):
    """A thread count for every fit of this process and its workers (``PIDKL_THREADS``,
    read by :func:`pyro_pidkl.infer.threads.fit_threads`); 0 leaves the default."""
    if n:
        os.environ["PIDKL_THREADS"] = str(n)


def _files_command(args, parser):
    if args.experiment is not None:
        parser.error(f"give either an example ({args.experiment}) or --data, not both")
    if not args.equation:
        parser.error("--data needs --equation: a built-in name or FILE.py[:NAME]")
    for flag in ("methods", "steps", "lr", "gamma", "particles"):
        if getattr(args, flag) is not None:
            parser.error(f"--{flag} is for the built-in examples; with --data the fit runs at "
                         f"the model's defaults")
    _threads(args.threads)
    from ..userfit import fit_files, parse_domain

    summary = fit_files(args.data, args.equation, inputs=args.inputs, target=args.target,
                        params=args.param, model=args.model,
                        domain=parse_domain(args.domain) if args.domain else None,
                        source=args.source, collocation=args.collocation,
                        likelihood=args.likelihood,
                        predict=args.predict, grid=args.grid, out=args.out, seed=args.seed,
                        progress=not args.quiet,
                        echo=(lambda m: print(m, file=sys.stderr)) if args.json else print)
    if args.json:
        print(json.dumps(summary, indent=2))
    return 0


def _fit_command(args, parser):
    if args.data is not None:
        return _files_command(args, parser)
    if args.experiment is None:
        parser.error("expected an example (EXAMPLE) or your data (--data FILE.csv "
                     "--equation ...)")
    if args.experiment not in CATALOGUE:
        parser.error(f"expected an example among {', '.join(_public())}; got "
                     f"{args.experiment!r}")
    for flag in ("equation", "predict", "grid", "domain", "inputs", "target", "collocation"):
        if getattr(args, flag) not in (None, [], ()):
            parser.error(f"--{flag} is for your own data (--data)")
    if args.param:
        parser.error("--param is for your own data (--data)")
    if args.likelihood != "gaussian":
        parser.error("--likelihood is for your own data (--data)")
    args.methods = args.methods or "pcgp,pidkl,dkl"
    args.gamma = 1.0 if args.gamma is None else args.gamma
    args.particles = args.particles or 1
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
                            data.input_names, gamma=args.gamma, m=args.m or 10)
        result = fit(model, num_steps=steps, lr=lr, num_particles=args.particles,
                     progress=not args.quiet,
                     method="auto" if method.startswith("pcgp") else "adam")
        mean, var_y = model(data.X_test, noiseless=False)
        scores = predictive_scores(mean, var_y, data.y_test)
        row = {"experiment": experiment.name, "method": method, "seed": args.seed,
               "steps": result.num_steps if method.startswith("pcgp") else steps,
               "lr": lr, "threads": result.threads,
               "rmse": scores["rmse"], "nrmse": scores["nrmse"],
               "test_lpd": scores["test_lpd"], "coverage95": scores["coverage"][0.95],
               "fit_seconds": result.seconds, "final_loss": result.final_loss}
        if getattr(model, "physics", None) is not None:
            row.update(gamma=model.physics.gamma, m=model.physics.m)
        if getattr(model, "physics", None) is not None or hasattr(model, "equation"):
            row.update(initial=experiment.initial, learned=model.equation_parameters(),
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
            setting = f"gamma={r['gamma']}, m={r['m']}; " if "gamma" in r else ""
            print(f"{r['method']}: {setting}equation parameters learned {learned} (started at "
                  f"{r['initial']}, truth {r['truth']})")
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


def _public():
    return [n for n in CATALOGUE if n not in DEVELOPMENT]


class _Help(argparse.RawDescriptionHelpFormatter):
    """Descriptions kept as written; each option's default shown after its help unless the
    help names it or there is none to show."""

    def _get_help_string(self, action):
        text = action.help or ""
        if ("default" not in text and action.default not in (None, False, [], argparse.SUPPRESS)
                and action.option_strings):
            text += " (default: %(default)s)"
        return text


def build_parser():
    from .. import __version__
    parser = argparse.ArgumentParser(prog="pidkl", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"pyro_pidkl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    examples = "\n".join(
        f"  {name:<13} " + ", ".join(m + ("*" if m in defaults else "") for m in methods)
        for name, (methods, defaults, _) in CATALOGUE.items() if name not in DEVELOPMENT)
    development = (f"\n\nAlso accepted: {', '.join(DEVELOPMENT)}, the twins of ode and "
                   f"diffusion on which the paper's protocol was tuned (docs/paper.md).")
    p = sub.add_parser(
        "fit", formatter_class=_Help,
        help="fit your equation to your data (--data), or the methods of a built-in example",
        description="Fit a model of your equation to your CSV data:\n\n"
                    "  pidkl fit --data obs.csv --equation oscillator.py --domain t=0:6 "
                    "--grid 200 --out pred.csv\n\n"
                    "where oscillator.py defines an Equation (pyro_pidkl.physics.Equation) "
                    "and obs.csv has a header\nnaming the equation's inputs and one target "
                    "column; or fit the methods of a built-in example:\n\n"
                    "  pidkl fit ode --methods pcgp,pidkl,dkl",
        epilog="examples and their methods (* run by reproduce by default; pcgp is the "
               "physics-conditioned GP):\n" + examples + development)
    p.add_argument("experiment", nargs="?", metavar="EXAMPLE", default=None,
                   help="a built-in example (list below); leave out with --data")
    own = p.add_argument_group("your data (--data)")
    own.add_argument("--data", help="CSV file with a header: the inputs and the target")
    own.add_argument("--equation", help="a built-in equation (first_order_ode, heat_1d, "
                     "poisson_2d, diffusion_2d, burgers_1d) or FILE.py[:NAME]")
    own.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="starting value of a built-in equation's parameter (repeatable)")
    own.add_argument("--model", choices=("pcgp", "pidkl"), default="pcgp",
                     help="pcgp: the GP conditioned on the equation; pidkl: the paper's model")
    own.add_argument("--inputs", type=lambda t: tuple(c.strip() for c in t.split(",")),
                     help="input columns, comma-separated (default: the equation's inputs)")
    own.add_argument("--target", help="the observed column (default: the one other column)")
    own.add_argument("--domain", metavar="NAME=LOW:HIGH,...",
                     help="where the equation holds (default: the data's box)")
    own.add_argument("--source", choices=("zero", "gp"), default="zero",
                     help="the right-hand side g: zero (the equation as written) or an "
                          "unknown GP")
    own.add_argument("--likelihood", default="gaussian",
                     choices=("gaussian", "poisson", "negative_binomial", "lognormal"),
                     help="how the target arises (pcgp): Gaussian noise, counts (the "
                          "equation then for the log of their mean) or log-normal noise")
    own.add_argument("--collocation", type=_count(1), default=None,
                     help="collocation points (default: the model's, 200 per input for pcgp)")
    own.add_argument("--predict", metavar="FILE.csv",
                     help="predict at the inputs of this CSV file")
    own.add_argument("--grid", type=_count(2), default=None, metavar="N",
                     help="predict on a grid of N points per input over the domain")
    own.add_argument("--out", default="predictions.csv",
                     help="where predictions go: inputs, mean, sd, lower, upper (95%%)")
    ex = p.add_argument_group("a built-in example")
    ex.add_argument("--methods", default=None,
                    help="comma-separated methods of the example (default pcgp,pidkl,dkl)")
    ex.add_argument("--steps", type=_count(0), default=None,
                    help="optimisation steps (default: the example's protocol)")
    ex.add_argument("--lr", type=_non_negative, default=None,
                    help="Adam learning rate (default: the example's protocol)")
    ex.add_argument("--gamma", type=_non_negative, default=None,
                    help="PI-DKL's weight of the physics term (default 1)")
    ex.add_argument("--m", type=_count(1), default=None,
                    help="PI-DKL's collocation points per step (default 10)")
    ex.add_argument("--particles", type=_count(1), default=None,
                    help="PI-DKL's particles for Z and eps (default 1)")
    p.add_argument("--seed", type=_count(0), default=0, help="random seed")
    p.add_argument("--threads", type=_count(0), default=0,
                   help="torch threads per fit (0: one for problems up to 8000 rows, else "
                        "torch's count)")
    p.add_argument("--json", action="store_true", help="print the records as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    epilog = "experiments and their methods (* default):\n" + examples + development
    r = sub.add_parser("reproduce", help="a paper experiment: honest protocol, several seeds, "
                       "resumable", epilog=epilog, formatter_class=_Help,
                       description="Reproduce one of the paper's experiments with the honest "
                                   "protocol (choices on training data only, final iterate, "
                                   "seeds 0-4):\na table, OUT/results.json and figures. An "
                                   "interrupted run keeps every finished fit; the same command "
                                   "again\nskips them.")
    r.add_argument("experiment", choices=sorted(CATALOGUE), metavar="EXPERIMENT",
                   help="an experiment (list below)")
    r.add_argument("--methods", default=None, help="comma-separated (default: the "
                   "experiment's default methods; 'lfm' stands for all its latent force models)")
    r.add_argument("--seeds", type=_seeds, default=None,
                   help="e.g. 0-4 or 0,2,5 (default 0-4)")
    r.add_argument("--steps", type=_count(1), default=None,
                   help="steps per fit (default: the protocol's; others are marked * in tables "
                        "and figures)")
    r.add_argument("--out", default="runs", help="output folder")
    r.add_argument("--jobs", type=_count(1), default=min(2, os.cpu_count() or 1),
                   help="worker processes of one torch thread each")
    r.add_argument("--threads", type=_count(0), default=0,
                   help="torch threads per fit with --jobs 1 (0: one for problems up to 8000 "
                        "rows)")
    r.add_argument("--data", default=None, help="real-data experiments: the data file or "
                   "folder (default: $PIDKL_JURA / $PIDKL_PM25 / $PIDKL_MOCAP, then the usual "
                   "places)")
    r.add_argument("--cv-score", choices=("rmse", "lpd"), default=None,
                   help="what PI-DKL's cross-validation maximises on the validation points "
                        "(default: the experiment's protocol, rmse)")
    r.add_argument("--force", action="store_true",
                   help="redo fits already recorded in --out (default: resume, skipping them)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    t = sub.add_parser("table", help="the markdown table of a results.json",
                       formatter_class=_Help)
    t.add_argument("results", help="a results.json written by pidkl reproduce")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    commands = {"fit": _fit_command, "reproduce": _reproduce_command, "table": _table_command}
    sub = parser._subparsers._group_actions[0].choices[args.command]
    try:
        return commands[args.command](args, sub)
    except KeyboardInterrupt:
        print(f"pidkl {args.command}: interrupted (nothing was written after the last "
              f"message)", file=sys.stderr)
        return 130
    except (ValueError, TypeError, FileNotFoundError) as e:
        from ..errors import PIDKLError

        if isinstance(e, PIDKLError) or type(e) in (ValueError, TypeError, FileNotFoundError):
            print(f"pidkl {args.command}: error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
