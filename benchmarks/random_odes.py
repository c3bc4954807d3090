r"""A benchmark drawn at random: ODE problems generated from a seed, each fitted at the
library's defaults and by the textbook exact-ODE fit, side by side.

The generator is the benchmark: ``--seed S`` draws new problems, so it cannot be tuned to.
Families (each problem draws its coefficients, its sampling and its noise):

* ``growth``: logistic, Gompertz or Richards growth, ``r`` and ``K`` learned (Richards'
  shape known), 12-40 points over the rise;
* ``oscillator``: ``x'' + c x' + R(x) = A cos(w t)`` with a polynomial (``k x + b x^3``) or
  trigonometric (``w2 sin x``) restoring force, a known forcing, one to three coefficients
  learned, 30-60 points;
* ``network``: a mass-action reaction network of 2-4 species and 2-5 reactions drawn at
  random (first and second order, rates spread over two orders of magnitude), 0-2 species
  never measured (their initial values known to the exact fit's start and the library's
  ``scales``), 20-40 points of each measured species;
* ``epidemic``: SIR in fractions, the daily cases a known fraction of the infected
  (:math:`\mu = M i`, ``M`` the reporting rate times the population, 300-3000) observed as
  Poisson counts, the susceptibles never measured and their initial fraction known (a
  condition), ``beta`` and ``gamma`` learned (R0 1.3-4), 25-60 days; the system written for
  the log of the expected count, ``u = log(M i)``: ``s' = -beta s e^u / M``,
  ``u' = beta s - gamma``;
* noise: Gaussian (2-8% of the signal's range) or log-normal (3-10%; not for an
  oscillator, whose signal crosses zero); counts for an epidemic.

The user's starting values are the truth moved by a random factor of up to 3 either way,
as a new user's guesses are. Each problem is fitted by

* the library at its defaults (``PhysicsConditionedGP`` for one equation on the data's
  interval, ``ConditionedSystemGP`` for a network), intervals from
  ``coefficient_intervals(0.9)``, every warning recorded;
* the exact-ODE fit written as a statistician would, independent of the library:
  ``scipy.optimize.least_squares`` on ``solve_ivp`` (LSODA, rtol 1e-10; Jacobian by
  differences of 1e-6) over the coefficients' logs and the initial state, from the same start and four more (the start moved by up to
  a factor of 3), 90% intervals from the Gauss-Newton covariance (counts: Poisson deviance
  residuals, maximum likelihood, the covariance the inverse Fisher information).

Per coefficient: the relative error, whether the 90% interval covers the truth, its width,
whether it is marked identified, and a **confident miss**: an interval that excludes the
truth by more than its own width while marked identified. Targets (issue "Never
confidently wrong"): the library's median error at most the exact fit's, and above 1.5x
the exact fit's on at most 10% of coefficients; 90% intervals covering in 85-95% of the
coefficients where the exact fit's cover; confident misses at most 2%; every fit with an
error above three interval half-widths carries a warning.

    python benchmarks/random_odes.py --seed 1 --problems 100 --jobs 2 --out runs/random_odes_1.jsonl
    python benchmarks/random_odes.py --summary runs/random_odes_1.jsonl

With ``--numpyro K`` the first ``K`` problems are also fitted by NumPyro's NUTS on the exact
ODE (``peers/numpyro_random.py`` in its own environment, ``PIDKL_PEER_PYTHON``: ``python -m
venv ~/peer && ~/peer/bin/pip install numpyro jax``), two chains of 500 + 500 from the
truth: the reference posterior, its versions recorded.

    PIDKL_PEER_PYTHON=~/peer/bin/python python benchmarks/random_odes.py --seed 2 --problems 12 --numpyro 12
"""

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
Z90 = 1.6448536269514722


# -- the generator ------------------------------------------------------------------------------

def _noise(gen, y):
    """Noisy observations of ``y`` ``(n,)`` or ``(C, n)``: Gaussian or log-normal."""
    kind = str(gen.choice(["gaussian", "lognormal"]))
    if kind == "gaussian":
        level = float(gen.uniform(0.02, 0.08))
        spread = np.ptp(y, axis=-1, keepdims=True) + 1e-9
        return kind, level, y + level * spread * gen.standard_normal(y.shape)
    level = float(gen.uniform(0.03, 0.10))
    return kind, level, y * np.exp(level * gen.standard_normal(y.shape))


def _start(gen, truth):
    return {n: float(v * np.exp(gen.uniform(-math.log(3), math.log(3)))) for n, v in truth.items()}


def _solve(rhs, x0, t, rtol=1e-10):
    from scipy.integrate import solve_ivp
    sol = solve_ivp(rhs, (0.0, float(t[-1])), x0, t_eval=t, method="LSODA", rtol=rtol,
                    atol=1e-12)
    return sol.y if sol.success and sol.y.shape[1] == len(t) else None


def draw_growth(gen):
    law = str(gen.choice(["logistic", "gompertz", "richards"]))
    r = float(np.exp(gen.uniform(math.log(0.5), math.log(3.0))))
    K = float(np.exp(gen.uniform(math.log(1.0), math.log(50.0))))
    f0 = K * float(gen.uniform(0.02, 0.2))
    nu = float(gen.uniform(0.5, 2.5)) if law == "richards" else 1.0
    T = float(gen.uniform(1.2, 2.5)) * math.log(K / f0) / r * (2 if law == "gompertz" else 1.3)
    n = int(gen.integers(12, 41))
    t = np.sort(gen.uniform(0, T, n))
    t[0] = 0.0

    def rhs(_, x, r=r, K=K):
        f = x[0]
        if law == "gompertz":
            return [r * f * math.log(K / max(f, 1e-300))]
        return [r * f * (1 - (f / K) ** nu)]
    y = _solve(rhs, [f0], t)[0]
    kind, level, obs = _noise(gen, y)
    return {"family": "growth", "law": law, "truth": {"r": r, "K": K}, "nu": nu, "t": t.tolist(),
            "y": [obs.tolist()], "observed": [0], "x0": [f0], "noise": kind, "level": level,
            "start": _start(gen, {"r": r, "K": K})}


def draw_oscillator(gen):
    kind = str(gen.choice(["polynomial", "trigonometric"]))
    c = float(np.exp(gen.uniform(math.log(0.05), math.log(0.6))))
    A, w = float(gen.uniform(0.2, 1.5)), float(gen.uniform(0.5, 2.0))
    if kind == "polynomial":
        coeffs = {"c": c, "k": float(np.exp(gen.uniform(math.log(0.5), math.log(4.0)))),
                  "b": float(np.exp(gen.uniform(math.log(0.1), math.log(2.0))))}
    else:
        coeffs = {"c": c, "w2": float(np.exp(gen.uniform(math.log(0.5), math.log(6.0))))}
    learned = list(gen.permutation(list(coeffs))[:int(gen.integers(1, len(coeffs) + 1))])
    x0 = [float(gen.uniform(-2.0, 2.0)), float(gen.uniform(-1.0, 1.0))]
    T = float(gen.uniform(8.0, 16.0))
    n = int(gen.integers(30, 61))
    t = np.linspace(0, T, n)

    def rhs(s, x):
        force = A * math.cos(w * s)
        restoring = (coeffs["k"] * x[0] + coeffs["b"] * x[0] ** 3 if kind == "polynomial"
                     else coeffs["w2"] * math.sin(x[0]))
        return [x[1], -coeffs["c"] * x[1] - restoring + force]
    y = _solve(rhs, x0, t)[0]
    noise, level = "gaussian", float(gen.uniform(0.02, 0.08))   # a signal through zero
    obs = y + level * (np.ptp(y) + 1e-9) * gen.standard_normal(y.shape)
    truth = {k: coeffs[k] for k in learned}
    held = {k: v for k, v in coeffs.items() if k not in learned}
    return {"family": "oscillator", "law": kind, "truth": truth, "held": held, "A": A, "w": w,
            "t": t.tolist(), "y": [obs.tolist()], "observed": [0], "x0": x0, "noise": noise,
            "level": level, "start": _start(gen, truth)}


def mass_action(rates, reactions, S):
    """The right-hand side of a mass-action network of ``S`` species: each reaction
    ``(reactants, products)`` at its rate times the product of its reactants."""
    def rhs(_, x):
        d = np.zeros(S)
        for k, (a, b) in zip(rates, reactions):
            v = k * np.prod([x[i] for i in a])
            for i in a:
                d[i] -= v
            for i in b:
                d[i] += v
        return d
    return rhs


def draw_network(gen):
    """A random mass-action network whose trajectories stay finite and move."""
    for _ in range(50):
        S = int(gen.integers(2, 5))
        R = int(gen.integers(2, min(5, S + 2) + 1))
        reactions = []
        for _ in range(R):
            order = int(gen.integers(1, 3))
            reactants = sorted(int(v) for v in gen.choice(S, order, replace=True))
            products = sorted(int(v) for v in gen.choice(S, int(gen.integers(0, 3)), replace=True))
            if reactants != products:
                reactions.append((reactants, products))
        if len(reactions) < 2:
            continue
        rates = np.exp(gen.uniform(math.log(0.05), math.log(5.0), len(reactions)))
        x0 = gen.uniform(0.5, 2.0, S)

        rhs = mass_action(rates, reactions, S)
        T = float(gen.uniform(3.0, 8.0))
        n = int(gen.integers(20, 41))
        t = np.linspace(0, T, n)
        y = _solve(rhs, x0, t)
        if y is None or not np.isfinite(y).all() or np.abs(y).max() > 100:
            continue
        if (np.ptp(y, axis=1) < 0.05).any():
            continue
        hidden = sorted(int(v) for v in gen.choice(S, int(gen.integers(0, min(2, S - 1) + 1)),
                                                   replace=False))
        observed = [i for i in range(S) if i not in hidden]
        noise, level, obs = _noise(gen, y[observed])
        truth = {f"k{j}": float(v) for j, v in enumerate(rates)}
        return {"family": "network", "law": f"{S} species, {len(reactions)} reactions",
                "reactions": reactions, "truth": truth, "t": t.tolist(),
                "y": obs.tolist(), "observed": observed, "species": S, "x0": x0.tolist(),
                "noise": noise, "level": level, "start": _start(gen, truth)}
    raise RuntimeError("no network drawn")


def sir_log(M):
    """SIR for ``(s, u)``, ``u`` the log of the expected daily count ``M i``."""
    return lambda _, x, beta, gamma: [-beta * x[0] * math.exp(min(x[1], 700.0)) / M,
                                      beta * x[0] - gamma]


def draw_epidemic(gen):
    """An epidemic observed as Poisson counts of a known fraction of the infected."""
    for _ in range(50):
        gamma = float(np.exp(gen.uniform(math.log(0.1), math.log(0.4))))
        beta = gamma * float(gen.uniform(1.3, 4.0))
        s0 = float(gen.uniform(0.6, 0.99))
        M = float(np.exp(gen.uniform(math.log(300.0), math.log(3000.0))))
        u0 = math.log(float(gen.uniform(3.0, 20.0)))
        T = int(gen.integers(25, 61))
        t = np.arange(T + 1, dtype=float)
        rhs = sir_log(M)
        y = _solve(lambda s, x: rhs(s, x, beta, gamma), [s0, u0], t)
        if y is None or not np.isfinite(y).all() or np.exp(y[1]).max() < 2 * math.exp(u0):
            continue
        counts = gen.poisson(np.exp(y[1])).astype(float)
        truth = {"beta": beta, "gamma": gamma}
        return {"family": "epidemic", "law": f"SIR, R0 {beta / gamma:.2f}", "truth": truth,
                "M": M, "s0": s0, "t": t.tolist(), "y": [counts.tolist()], "observed": [1],
                "x0": [s0, u0], "noise": "poisson", "level": 0.0,
                "start": _start(gen, truth)}
    raise RuntimeError("no epidemic drawn")


FAMILIES = {"growth": draw_growth, "oscillator": draw_oscillator, "network": draw_network,
            "epidemic": draw_epidemic}
WEIGHTS = {"growth": 0.3, "oscillator": 0.3, "network": 0.25, "epidemic": 0.15}


def draw(seed, index, families):
    gen = np.random.default_rng([seed, index])
    names = [f for f in FAMILIES if f in families]
    p = np.array([WEIGHTS[f] for f in names])
    family = str(gen.choice(names, p=p / p.sum()))
    problem = FAMILIES[family](gen)
    problem.update(seed=seed, index=index)
    return problem


# -- the right-hand side of each problem, for the exact fit (numpy) ----------------------------

def numpy_rhs(problem, values):
    fam = problem["family"]
    if fam == "growth":
        r, K, nu = values["r"], values["K"], problem["nu"]
        if problem["law"] == "gompertz":
            return lambda _, x: [r * x[0] * math.log(K / max(x[0], 1e-300))]
        return lambda _, x: [r * x[0] * (1 - (max(x[0], 0.0) / K) ** nu)]
    if fam == "oscillator":
        v = {**problem["held"], **values}
        A, w = problem["A"], problem["w"]
        if problem["law"] == "polynomial":
            return lambda s, x: [x[1], -v["c"] * x[1] - v["k"] * x[0] - v["b"] * x[0] ** 3
                                 + A * math.cos(w * s)]
        return lambda s, x: [x[1], -v["c"] * x[1] - v["w2"] * math.sin(x[0]) + A * math.cos(w * s)]
    if fam == "epidemic":
        rhs = sir_log(problem["M"])
        return lambda s, x: rhs(s, x, values["beta"], values["gamma"])
    rates = [values[f"k{j}"] for j in range(len(problem["reactions"]))]
    return mass_action(rates, problem["reactions"], problem["species"])


#: right-hand side calls after which one solve of the exact fit gives up (a solve of these
#: problems takes a few hundred to a few thousand)
MAX_RHS_CALLS = 200_000


class _TooCostly(Exception):
    pass


def exact_fit(problem, starts=5):
    """The exact-ODE least-squares fit (module docstring): ``{name: (value, lower, upper)}``
    and its time."""
    from scipy.integrate import solve_ivp
    from scipy.optimize import least_squares
    began = time.process_time()
    names = list(problem["truth"])
    t = np.asarray(problem["t"])
    Y = np.asarray(problem["y"])
    observed = problem["observed"]
    C = len(problem["x0"])
    scale = np.maximum(np.ptp(Y, axis=1), 1e-6)
    # the initial state's start: the first datum of a measured output, the known value of one
    # never measured (a network's), a slope of zero for an oscillator's velocity
    x_start = np.array(problem["x0"], dtype=float)
    for j, c in enumerate(observed):
        x_start[c] = Y[j, 0]
    if problem["family"] == "oscillator":
        x_start[1] = (Y[0, 1] - Y[0, 0]) / (t[1] - t[0])
    counts = problem["family"] == "epidemic"
    if counts:              # the log of the first count; the susceptibles' fraction known
        x_start[1] = math.log(Y[0, 0] + 0.5)
    known = {0: problem["s0"]} if counts else {}

    def residuals(v):
        values = dict(zip(names, np.exp(v[:len(names)])))
        x0 = np.array(v[len(names):])
        for c, value in known.items():
            x0[c] = value
        rhs, calls = numpy_rhs(problem, values), [0]

        def capped(s, x):           # a trial point that makes the ODE stiff beyond use
            calls[0] += 1           # (a Gompertz state at 1e-300: LSODA ran for an hour)
            if calls[0] > MAX_RHS_CALLS:
                raise _TooCostly
            return rhs(s, x)
        try:
            sol = solve_ivp(capped, (0.0, float(t[-1])), x0, t_eval=t, method="LSODA",
                            rtol=1e-10, atol=1e-12)
        except _TooCostly:
            return np.full(Y.size, 1e3)
        if not sol.success or sol.y.shape[1] != len(t) or not np.isfinite(sol.y).all():
            return np.full(Y.size, 1e3)
        if counts:          # Poisson deviance residuals: least squares is the likelihood's
            mu = np.exp(np.minimum(sol.y[observed], 700.0))
            d = np.where(Y > 0, Y * np.log(np.maximum(Y, 1e-300) / mu), 0.0) - (Y - mu)
            return (np.sign(Y - mu) * np.sqrt(2 * np.maximum(d, 0.0))).ravel()
        return ((sol.y[observed] - Y) / scale[:, None]).ravel()

    gen = np.random.default_rng(problem["index"])
    base = np.log([problem["start"][n] for n in names])
    best = None
    for k in range(starts):
        th = base if k == 0 else base + gen.uniform(-math.log(3), math.log(3), len(names))
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                # differences of 1e-6 on trajectories solved to 1e-10: a Jacobian (and so an
                # interval) that the solver's error does not swamp
                res = least_squares(residuals, np.r_[th, x_start], method="trf", max_nfev=200,
                                    diff_step=1e-6)
        except (ValueError, ArithmeticError):
            continue
        if best is None or res.cost < best.cost:
            best = res
    J, r = best.jac, best.fun
    if known:                       # a known state is no parameter
        J = np.delete(J, [len(names) + c for c in known], axis=1)
    dof = max(r.size - J.shape[1], 1)
    cov = np.linalg.pinv(J.T @ J) * (1.0 if counts else float(r @ r) / dof)
    out = {}
    for i, n in enumerate(names):
        s = math.sqrt(max(cov[i, i], 0.0))
        u = best.x[i]
        out[n] = (float(np.exp(u)), float(np.exp(u - Z90 * s)), float(np.exp(u + Z90 * s)))
    return out, time.process_time() - began


# -- the library's fit --------------------------------------------------------------------------

def user_problem(problem):
    """What a user writes for a drawn problem: ``(equation or system, data, extras)`` with
    ``data`` ``(t, y)`` for one equation or ``{output: (t, y)}`` for a system, and ``extras``
    its ``scales`` (unmeasured species: their initial value and size) or, for an epidemic,
    the Poisson likelihood and the known initial fraction of susceptibles."""
    import torch
    import pyro_pidkl as pk
    from pyro_pidkl.physics import Equation, Parameter
    t = torch.tensor(problem["t"], dtype=torch.float64)
    Y = torch.tensor(problem["y"], dtype=torch.float64)
    start = problem["start"]
    fam = problem["family"]
    if fam == "growth":
        nu = problem["nu"]
        if problem["law"] == "gompertz":
            def psi(f, x, r, K):
                return f.d("t") - r * f * torch.log(K / f)
        else:
            def psi(f, x, r, K):
                return f.d("t") - r * f * (1 - (f / K) ** nu)
        eq = Equation(psi, inputs=("t",), r=Parameter(start["r"]), K=Parameter(start["K"]))
        return eq, (t, Y[0]), {}
    if fam == "oscillator":
        held, A, w = problem["held"], problem["A"], problem["w"]
        params = {n: Parameter(start[n]) if n in start else Parameter(v, fixed=True)
                  for n, v in {**held, **start}.items()}
        if problem["law"] == "polynomial":
            def psi(f, x, c, k, b):
                return (f.d("t", "t") + c * f.d("t") + k * f + b * f ** 3
                        - A * torch.cos(w * x["t"]))
        else:
            def psi(f, x, c, w2):
                return (f.d("t", "t") + c * f.d("t") + w2 * torch.sin(f)
                        - A * torch.cos(w * x["t"]))
        return Equation(psi, inputs=("t",), **params), (t, Y[0]), {}
    if fam == "network":
        S, reactions = problem["species"], problem["reactions"]
        outputs = tuple(f"s{i}" for i in range(S))

        def network(f, x, **k):
            rates = [k[f"k{j}"] for j in range(len(reactions))]
            d = [f[o].d("t") for o in outputs]
            for rate, (a, b) in zip(rates, reactions):
                v = rate
                for i in a:
                    v = v * f[outputs[i]]
                for i in a:
                    d[i] = d[i] + v
                for i in b:
                    d[i] = d[i] - v
            return tuple(d)
        system = pk.EquationSystem(network, outputs=outputs, inputs=("t",),
                                   **{n: Parameter(v) for n, v in start.items()})
        data = {outputs[c]: (t, Y[j]) for j, c in enumerate(problem["observed"])}
        scales = {outputs[c]: (problem["x0"][c], max(problem["x0"][c], 0.1))
                  for c in range(S) if c not in problem["observed"]}
        return system, data, {"scales": scales or None}
    M, s0 = problem["M"], problem["s0"]

    def sir(f, x, beta, gamma):
        return (f["s"].d("t") + beta * f["s"] * torch.exp(f["u"]) / M,
                f["u"].d("t") - beta * f["s"] + gamma)
    system = pk.EquationSystem(sir, outputs=("s", "u"), inputs=("t",),
                               **{n: Parameter(v) for n, v in start.items()})
    return system, {"u": (t, Y[0])}, {
        "likelihoods": {"u": "poisson"},
        "conditions": [pk.Condition([[0.0]], lambda f, x: f["s"], s0, name="s(0)")]}


def _fitted(make, problem):
    """Build (``make(equation, data, extras)``) and fit one model of a drawn problem at its
    defaults, one thread: its 90% intervals, every warning, a crash's message, the time."""
    import torch
    import pyro_pidkl as pk
    torch.set_num_threads(1)
    began = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, error, iv = None, None, {}
        try:
            model = make(*user_problem(problem))
            pk.fit(model, progress=False)
            iv = model.coefficient_intervals(0.9)
        except Exception as e:                      # recorded: a crash is a result too
            error = f"{type(e).__name__}: {str(e)[:200]}"
    out = {n: (float(v["value"]), float(v["lower"]), float(v["upper"]), bool(v["identified"]))
           for n, v in iv.items()}
    referee = getattr(model, "referee", None)
    return {"intervals": out, "warnings": [str(w.message)[:300] for w in caught],
            "error": error, "verdict": None if referee is None else referee.verdict,
            "seconds": time.process_time() - began}


def library_fit(problem):
    """The library at its defaults: ``PhysicsConditionedGP`` for one equation on the data's
    interval, ``ConditionedSystemGP`` for a system."""
    import pyro_pidkl as pk

    def make(equation, data, extras):
        if isinstance(equation, pk.EquationSystem):
            return pk.ConditionedSystemGP(equation, data, **extras)
        return pk.PhysicsConditionedGP(*data, equation)
    return _fitted(make, problem)


def statespace_fit(problem):
    """The state-space solver (``pk.StateSpaceGP``) on the same problem: the library's
    O(N) probabilistic ODE solver, Gaussian likelihood (an epidemic's counts: refused)."""
    import pyro_pidkl as pk
    if problem["family"] == "epidemic":
        return {"intervals": {}, "warnings": [], "error": "counts: not supported",
                "verdict": None, "seconds": math.nan}
    return _fitted(lambda equation, data, extras: pk.StateSpaceGP(equation, data, **extras),
                   problem)


def numpyro_fit(problem, python):
    """NumPyro's NUTS on the exact ODE (``peers/numpyro_random.py``, in the interpreter
    ``python``): the reference posterior."""
    sys.path.insert(0, HERE)
    import records
    spec = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in problem.items()}
    spec["truth"] = {str(k): float(v) for k, v in problem["truth"].items()}
    spec["start"] = {str(k): float(v) for k, v in problem["start"].items()}
    spec["held"] = {str(k): float(v) for k, v in problem.get("held", {}).items()}
    return records.call_peer(python, spec, peer="numpyro_random.py",
                             env={"OMP_NUM_THREADS": "1"})


def probdiffeq_fit(problem):
    """probdiffeq's Fenrir fit of the same problem from the user's starting values
    (``peers/probdiffeq_random.py``, in the interpreter ``PIDKL_PEER_PD_PYTHON``: its own
    environment), Laplace intervals in the log (identified where that sd is below 1, the
    library's rule); an epidemic's counts refused."""
    if problem["family"] == "epidemic":
        return {"intervals": {}, "warnings": [], "error": "counts: not supported",
                "verdict": None, "seconds": math.nan}
    python = os.environ.get("PIDKL_PEER_PD_PYTHON")
    if not python:
        return {"intervals": {}, "warnings": [], "verdict": None, "seconds": math.nan,
                "error": "no peer interpreter (set PIDKL_PEER_PD_PYTHON)"}
    sys.path.insert(0, HERE)
    import records
    spec = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in problem.items()}
    spec["truth"] = {str(k): float(v) for k, v in problem["truth"].items()}
    spec["start"] = {str(k): float(v) for k, v in problem["start"].items()}
    spec["held"] = {str(k): float(v) for k, v in problem.get("held", {}).items()}
    out = records.call_peer(python, spec, peer="probdiffeq_random.py",
                            env={"OMP_NUM_THREADS": "1"})
    if "refused" in out:
        return {"intervals": {}, "warnings": [], "error": out["refused"], "verdict": None,
                "seconds": math.nan}
    return {"intervals": {n: (v["mean"], v["lower"], v["upper"], bool(v["sd_log"] < 1.0))
                          for n, v in out["coefficients"].items()},
            "warnings": [], "error": None, "verdict": None, "seconds": out["seconds"],
            "versions": out["versions"]}


METHODS = {"library": "library_fit", "statespace": "statespace_fit",
           "probdiffeq": "probdiffeq_fit"}


def run_one(args):
    seed, index, families, python, *rest = args
    methods = rest[0] if rest else ("library",)
    problem = draw(seed, index, families)
    record = {k: problem[k] for k in ("seed", "index", "family", "law", "truth", "noise", "level",
                                      "start")}
    try:
        record["exact"], record["exact_seconds"] = exact_fit(problem)
    except Exception as e:
        record["exact"], record["exact_seconds"] = {}, math.nan
        record["exact_error"] = f"{type(e).__name__}: {e}"
    if python:
        record["numpyro"] = numpyro_fit(problem, python)
    for method in methods:
        try:
            record[method] = globals()[METHODS[method]](problem)
        except Exception:
            record[method] = {"intervals": {}, "warnings": [], "verdict": None,
                              "error": traceback.format_exc(limit=2)[-300:],
                              "seconds": math.nan}
    return record


# -- the summary --------------------------------------------------------------------------------

def summarise(records, key="library"):
    """The summary of method ``key``'s fits (``library`` or ``statespace``) against the
    exact fit's, over the records that have them."""
    records = [r for r in records if key in r]
    rows = []
    for rec in records:
        lib = rec[key]
        for n, truth in rec["truth"].items():
            ex, li = rec["exact"].get(n), lib["intervals"].get(n)
            if ex is None or li is None:
                rows.append({"missing": True, "family": rec["family"]})
                continue
            value, lower, upper, identified = li
            width = upper - lower
            outside = max(lower - truth, truth - upper, 0.0)
            rows.append({
                "family": rec["family"], "missing": False,
                "lib_err": abs(value - truth) / abs(truth), "ex_err": abs(ex[0] - truth) / abs(truth),
                "lib_cover": lower <= truth <= upper, "ex_cover": ex[1] <= truth <= ex[2],
                "lib_width": width / abs(truth), "ex_width": (ex[2] - ex[1]) / abs(truth),
                "confident_miss": bool(identified and outside > width),
                "big": abs(value - truth) > 3 * width / 2,
                "warned": bool(lib["warnings"]) or lib["error"] is not None})
    ok = [r for r in rows if not r["missing"]]
    lib_err = np.array([r["lib_err"] for r in ok])
    ex_err = np.array([r["ex_err"] for r in ok])
    worse = np.mean([r["lib_err"] > 1.5 * r["ex_err"] and r["lib_err"] > 0.01 for r in ok])
    where = [r for r in ok if r["ex_cover"]]
    cover = np.mean([r["lib_cover"] for r in where]) if where else math.nan
    misses = np.mean([r["confident_miss"] for r in ok]) if ok else math.nan
    unwarned = sum(r["big"] and not r["warned"] for r in ok)
    out = {
        "problems": len(records), "coefficients": len(rows), "missing": len(rows) - len(ok),
        "library_median_error": float(np.median(lib_err)) if ok else math.nan,
        "exact_median_error": float(np.median(ex_err)) if ok else math.nan,
        "library_worse_1_5x": float(worse) if ok else math.nan,
        "library_coverage_90": float(np.mean([r["lib_cover"] for r in ok])) if ok else math.nan,
        "exact_coverage_90": float(np.mean([r["ex_cover"] for r in ok])) if ok else math.nan,
        "library_coverage_where_exact_covers": float(cover),
        "library_median_width": float(np.median([r["lib_width"] for r in ok])) if ok else math.nan,
        "exact_median_width": float(np.median([r["ex_width"] for r in ok])) if ok else math.nan,
        "confident_misses": float(misses), "big_errors_unwarned": int(unwarned),
        "library_cpu_s_median": float(np.nanmedian([r[key]["seconds"] for r in records])),
        "library_cpu_s_max": float(np.nanmax([r[key]["seconds"] for r in records])),
        "exact_cpu_s_median": float(np.nanmedian([r["exact_seconds"] for r in records])),
        "verdicts": {str(v): sum(r[key].get("verdict") == v for r in records)
                     for v in sorted({r[key].get("verdict") for r in records}, key=str)},
        "crashes": sum(r[key]["error"] is not None for r in records),
    }
    by_family = {}
    for fam in sorted({r["family"] for r in ok}):
        rs = [r for r in ok if r["family"] == fam]
        by_family[fam] = {"coefficients": len(rs),
                          "library_median_error": float(np.median([r["lib_err"] for r in rs])),
                          "exact_median_error": float(np.median([r["ex_err"] for r in rs])),
                          "library_coverage": float(np.mean([r["lib_cover"] for r in rs])),
                          "exact_coverage": float(np.mean([r["ex_cover"] for r in rs])),
                          "confident_misses": int(sum(r["confident_miss"] for r in rs))}
    out["by_family"] = by_family
    ref = []
    for rec in records:
        nuts = rec.get("numpyro") or {}
        for n, truth in rec["truth"].items():
            post = (nuts.get("coefficients") or {}).get(n)
            li, ex = rec[key]["intervals"].get(n), rec["exact"].get(n)
            if post is None or li is None or ex is None:
                continue
            ref.append({"nuts_covers": post["lower"] <= truth <= post["upper"],
                        "nuts_err": abs(post["mean"] - truth) / abs(truth),
                        "lib_has_nuts_mean": li[1] <= post["mean"] <= li[2],
                        "ex_has_nuts_mean": ex[1] <= post["mean"] <= ex[2],
                        "r_hat": post["r_hat"], "seconds": nuts.get("seconds", math.nan)})
    if ref:
        out["numpyro"] = {
            "coefficients": len(ref),
            "nuts_coverage_90": float(np.mean([r["nuts_covers"] for r in ref])),
            "nuts_median_error": float(np.median([r["nuts_err"] for r in ref])),
            "library_interval_holds_nuts_mean": float(np.mean([r["lib_has_nuts_mean"] for r in ref])),
            "exact_interval_holds_nuts_mean": float(np.mean([r["ex_has_nuts_mean"] for r in ref])),
            "max_r_hat": float(np.max([r["r_hat"] for r in ref])),
            "versions": next((rec["numpyro"].get("versions") for rec in records
                              if (rec.get("numpyro") or {}).get("versions")), None)}
    targets = {
        "median error <= exact's": out["library_median_error"] <= out["exact_median_error"],
        "worse than 1.5x exact on <= 10%": out["library_worse_1_5x"] <= 0.10,
        "coverage 85-95% where exact covers": 0.85 <= out["library_coverage_where_exact_covers"] <= 0.95,
        "confident misses <= 2%": out["confident_misses"] <= 0.02,
        "every big error warned": out["big_errors_unwarned"] == 0,
    }
    return out, targets


def print_summary(records):
    for key in METHODS:
        if any(key in r for r in records):
            print(f"== {key} (the 'library_' fields below are its) ==")
            _print_summary(records, key)


def _print_summary(records, key):
    out, targets = summarise(records, key)
    by_family = out.pop("by_family")
    print(json.dumps(out, indent=1, default=str))
    print("by family:")
    for fam, v in by_family.items():
        print(f"  {fam}: {json.dumps(v)}")
    print("targets:")
    for name, met in targets.items():
        print(f"  {name}: {'met' if met else 'MISSED'}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--problems", type=int, default=100)
    p.add_argument("--start", type=int, default=0, help="first problem index")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--only", default=None,
                   help="fit only the drawn problems of these families (the draws unchanged: "
                        "a rerun of some families of a seed at a later commit)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--out", default=None, help="JSON lines, appended as each problem ends")
    p.add_argument("--summary", default=None, help="summarise a records file and stop")
    p.add_argument("--methods", default="library",
                   help="the fits to run beside the exact fit: library (the conditioned "
                        "GPs at defaults), statespace (pk.StateSpaceGP), probdiffeq (the peer's "
                        "Fenrir fit, PIDKL_PEER_PD_PYTHON)")
    p.add_argument("--numpyro", type=int, default=0,
                   help="NumPyro's NUTS on the first this many problems (PIDKL_PEER_PYTHON)")
    a = p.parse_args()
    if a.summary:
        with open(a.summary) as fh:
            print_summary([json.loads(line) for line in fh if line.strip()])
        return
    families = set(a.families.split(","))
    python = os.environ.get("PIDKL_PEER_PYTHON") if a.numpyro else None
    if a.numpyro and not python:
        print("numpyro left out: set PIDKL_PEER_PYTHON to an interpreter with numpyro and jax")
    methods = tuple(a.methods.split(","))
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise SystemExit(f"Expected --methods among {tuple(METHODS)}; got {bad}")
    tasks = [(a.seed, i, families, python if i < a.start + a.numpyro else None, methods)
             for i in range(a.start, a.start + a.problems)]
    if a.only:
        only = set(a.only.split(","))
        tasks = [task for task in tasks if draw(a.seed, task[1], families)["family"] in only]
    records = []
    out = open(a.out, "a") if a.out else None
    try:
        pool = mp.get_context("spawn").Pool(a.jobs) if a.jobs > 1 else None
        results = pool.imap_unordered(run_one, tasks) if pool else map(run_one, tasks)
        for rec in results:
            records.append(rec)
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            print(f"[{rec['index']}] {rec['family']} ({rec['law']}): truth "
                  + ", ".join(f"{n} {v:.3g}" for n, v in rec["truth"].items())
                  + "".join(f" | {m} " + ", ".join(f"{n} {v[0]:.3g}" for n, v in
                                                   rec[m]["intervals"].items())
                            + f" ({rec[m]['seconds']:.1f} s, {rec[m].get('verdict')}, "
                            f"{len(rec[m]['warnings'])} warnings)" for m in methods)
                  + " | exact " + ", ".join(f"{n} {v[0]:.3g}" for n, v in rec["exact"].items())
                  + f" ({rec['exact_seconds']:.1f} s)", flush=True)
        if pool:
            pool.close()
    finally:
        if out:
            out.close()
    print_summary(records)


if __name__ == "__main__":
    main()
