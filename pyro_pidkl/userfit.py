r"""Fit a model of your equation to your data from files: what ``pidkl fit --data`` runs.

The data are a CSV file with a header; the equation is a built-in one
(:mod:`pyro_pidkl.physics.library`, its parameters' starting values as ``NAME=VALUE``) or an
:class:`~pyro_pidkl.physics.Equation` defined in a Python file (``FILE.py`` when the file
defines one, ``FILE.py:NAME`` to pick). The model is the physics-conditioned GP (default)
or PI-DKL; the learned coefficients are printed with their intervals, and predictions at
the points of a CSV file or on a grid over the domain are written as a CSV file of
``inputs, mean, sd, lower, upper`` (a central 95% interval of the noiseless function).
"""

import csv
import os
import runpy
import time

import numpy as np
import torch

from .physics import library
from .physics.collocation import collocation_points
from .physics.domain import Box
from .models.parts.likelihoods import LIKELIHOODS
from .physics.equation import Equation

__all__ = ["load_equation", "parse_domain", "read_table", "fit_files"]

BUILT_IN = tuple(library.__all__)


def read_table(path):
    """A CSV file with a header as ``{column: float array}``."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Expected a CSV file with a header; {path} is not a file")
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    if len(rows) < 2:
        raise ValueError(f"Expected a header and at least one row in {path}; got {len(rows)} "
                         f"line(s)")
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    bad = [i + 2 for i, r in enumerate(body) if len(r) != len(header)]
    if bad:
        raise ValueError(f"Expected {len(header)} columns on every row of {path}; rows {bad[:5]}"
                         f" differ")
    try:
        values = np.array([[float(c) for c in r] for r in body], dtype=np.float64)
    except ValueError as e:
        raise ValueError(f"Expected numbers below the header of {path}; got {e}") from None
    return {h: values[:, j] for j, h in enumerate(header)}


def _number(text, what):
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"Expected a number for {what}; got {text!r}") from None


def parse_domain(text):
    """``"t=0:6,x=0:1"`` as ``{"t": (0.0, 6.0), "x": (0.0, 1.0)}``."""
    out = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, bounds = part.partition("=")
        low, sep, high = bounds.partition(":")
        if not name or not sep:
            raise ValueError(f"Expected the domain as NAME=LOW:HIGH[,NAME=LOW:HIGH...]; got "
                             f"{text!r}")
        out[name.strip()] = (_number(low, f"the low end of {name}"),
                             _number(high, f"the high end of {name}"))
    return out


def load_equation(spec, params=()):
    """The :class:`~pyro_pidkl.physics.Equation` of ``spec``: a built-in name (called with
    ``params``, ``["NAME=VALUE", ...]``) or ``FILE.py[:NAME]``."""
    values = {}
    for p in params:
        name, sep, value = p.partition("=")
        if not sep:
            raise ValueError(f"Expected a parameter as NAME=VALUE; got {p!r}")
        values[name.strip()] = _number(value, f"parameter {name.strip()}")
    if spec in BUILT_IN:
        try:
            return getattr(library, spec)(**values)
        except TypeError as e:
            raise ValueError(f"Expected the parameters of {spec} ({e})") from None
    path, _, name = spec.partition(":") if spec.count(":") == 1 and not os.path.isfile(spec) \
        else (spec, "", "")
    if not path.endswith(".py") or not os.path.isfile(path):
        raise ValueError(f"Expected a built-in equation ({', '.join(BUILT_IN)}) or a Python "
                         f"file FILE.py[:NAME] defining an Equation; got {spec!r}")
    if values:
        raise ValueError(f"Expected no --param for an equation from a file (its Parameters "
                         f"give the starting values); got {sorted(values)}")
    try:
        scope = runpy.run_path(path)
    except SyntaxError as e:
        raise ValueError(f"Expected a Python file defining an Equation; {path} line "
                         f"{e.lineno}: SyntaxError: {e.msg}") from None
    except Exception as e:  # the user's file raised: one line, where and what
        tb = e.__traceback__
        line = None
        while tb is not None:                 # the deepest frame inside the user's file
            if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        where = f" line {line}" if line is not None else ""
        raise ValueError(f"Expected a Python file defining an Equation; running {path}{where} "
                         f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                         ) from None
    found = {k: v for k, v in scope.items() if isinstance(v, Equation)}
    if name:
        if name not in found:
            raise ValueError(f"Expected an Equation named {name!r} in {path}; it defines "
                             f"{sorted(found) or 'none'}")
        return found[name]
    if len(found) != 1:
        raise ValueError(f"Expected one Equation in {path} (or FILE.py:NAME to pick one); it "
                         f"defines {sorted(found) or 'none'}")
    return next(iter(found.values()))


def fit_files(data, equation, inputs=None, target=None, params=(), model="pcgp", domain=None,
              source="zero", collocation=None, predict=None, grid=None, out=None, seed=0,
              threads="auto", progress=True, echo=print, likelihood="gaussian"):
    """Fit ``model`` (``"pcgp"``, the physics-conditioned GP, or ``"pidkl"``) of
    ``equation`` to the CSV file ``data``; write predictions when ``predict`` (a CSV file of
    inputs) or ``grid`` (points per input over the domain) is given.

    :param inputs: the input columns (default: the equation's inputs).
    :param target: the observed column (default: the one column that is not an input).
    :param likelihood: how the target arises from :math:`f` (``"pcgp"`` only):
        ``"gaussian"`` (default), ``"poisson"`` or ``"negative_binomial"`` (counts, :math:`f`
        the log of their mean: the predictions are of it) or ``"lognormal"``.
    :returns: a summary dict (``model``, ``n``, ``seconds``, ``threads``, ``coefficients``,
        ``predictions``, the file written, and ``command_cpu_seconds``, the process's CPU
        time at the end: the whole command, imports included).
    """
    import pyro

    from .infer.svi import fit
    from .models import PIDKL, PhysicsConditionedGP

    if model not in ("pcgp", "pidkl"):
        raise ValueError(f"Expected model 'pcgp' or 'pidkl'; got {model!r}")
    if source not in ("zero", "gp"):
        raise ValueError(f"Expected source 'zero' or 'gp'; got {source!r}")
    if likelihood not in LIKELIHOODS or (model != "pcgp" and likelihood != "gaussian"):
        raise ValueError(f"Expected likelihood among {tuple(LIKELIHOODS)} (all but 'gaussian' "
                         f"with model 'pcgp' only); got {likelihood!r} with model {model!r}")
    if predict is not None or grid is not None:         # before the fit, not after it
        folder = os.path.dirname(os.path.abspath(out or "predictions.csv"))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"Expected the folder of --out {out} to exist; "
                                    f"{folder} does not")
        if not os.access(folder, os.W_OK):
            raise ValueError(f"Expected a folder that can be written for --out {out}; "
                             f"{folder} cannot")
        if predict is not None and not os.path.isfile(predict):
            raise FileNotFoundError(f"Expected the inputs to predict at in a CSV file; "
                                    f"{predict} is not a file")
    eq = load_equation(equation, params)
    table = read_table(data)
    inputs = tuple(inputs) if inputs else tuple(eq.inputs or ())
    missing = [c for c in inputs if c not in table]
    if not inputs or missing:
        raise ValueError(f"Expected input columns {inputs or '(name them with --inputs)'} in "
                         f"{data}; it has {list(table)}")
    if target is None:
        rest = [c for c in table if c not in inputs]
        if len(rest) != 1:
            raise ValueError(f"Expected one column besides the inputs {inputs} in {data} (or "
                             f"--target); got {rest}")
        target = rest[0]
    if target not in table:
        raise ValueError(f"Expected the target column {target!r} in {data}; it has "
                         f"{list(table)}")
    X = torch.as_tensor(np.stack([table[c] for c in inputs], 1))
    y = torch.as_tensor(table[target])
    box = Box(**(domain or {}))
    pyro.set_rng_seed(seed)
    if model == "pcgp":
        kwargs = {} if collocation is None else {"collocation": int(collocation)}
        m = PhysicsConditionedGP(X, y, eq, input_names=inputs, domain=box, source=source,
                                 likelihood=likelihood, **kwargs)
        result = fit(m, progress=progress, threads=threads)
    else:
        m = PIDKL(X, y, eq, input_names=inputs, domain=box, seed=seed,
                  **({} if collocation is None else {"m": int(collocation)}))
        result = fit(m, progress=progress, threads=threads)
    summary = {"model": model, "equation": eq.name, "n": int(X.shape[0]), "inputs": inputs,
               "target": target, "seconds": result.seconds, "threads": result.threads,
               "coefficients": {}}
    began = time.perf_counter()
    if model == "pcgp":
        summary["coefficients"] = m.coefficient_intervals(0.95)
    else:
        summary["coefficients"] = {k: {"value": v} for k, v in m.equation_parameters().items()}
    echo(f"{type(m).__name__} of {eq.name} on {X.shape[0]} points of {data}: fitted in "
         f"{result.seconds:.1f} s ({result.threads} torch thread(s); the intervals "
         f"{time.perf_counter() - began:.1f} s)")
    for k, v in summary["coefficients"].items():
        if "lower" in v:
            echo(f"  {k} = {v['value']:.6g}  (95% interval {v['lower']:.6g} to {v['upper']:.6g})")
        else:
            echo(f"  {k} = {v['value']:.6g}")
    if predict is not None or grid is not None:
        if predict is not None:
            new = read_table(predict)
            lost = [c for c in inputs if c not in new]
            if lost:
                raise ValueError(f"Expected input columns {inputs} in {predict}; it has "
                                 f"{list(new)}")
            Xp = torch.as_tensor(np.stack([new[c] for c in inputs], 1))
        else:
            resolved = box.resolve(X, inputs)
            Xp = collocation_points(resolved, int(grid) ** len(inputs), "grid")
        mean, var = m(Xp)
        sd = var.clamp(min=0).sqrt()
        out = out or "predictions.csv"
        with open(out, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([*inputs, "mean", "sd", "lower", "upper"])
            for row, mu, s in zip(Xp.tolist(), mean.tolist(), sd.tolist()):
                w.writerow([*(f"{v:.10g}" for v in row), f"{mu:.10g}", f"{s:.6g}",
                            f"{mu - 1.959964 * s:.10g}", f"{mu + 1.959964 * s:.10g}"])
        summary["predictions"] = out
        echo(f"predictions at {Xp.shape[0]} points: {out}")
    # the whole command: its imports, the fit with its checks, the intervals, the predictions
    summary["command_cpu_seconds"] = time.process_time()
    stages = ", ".join(f"{k} {v:.1f}" for k, v in result.stage_seconds.items())
    echo(f"done: {summary['command_cpu_seconds']:.1f} CPU s for the whole command (the fit "
         f"{result.seconds:.1f} s of it, wall{'; CPU s by stage: ' + stages if stages else ''})")
    return summary
