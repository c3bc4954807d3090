r"""Test problems for physics-informed regression: a domain, an equation with known
coefficients, its exact solution, and a rule for splitting the domain.

Each :class:`Problem` is a few lines: the solution :math:`f` is written in torch (closed
form, so the tests check that it satisfies its equation by autograd), the equation through
the public :class:`~pyro_pidkl.physics.Equation` API as a user would write it, and
:meth:`Problem.sample` draws noisy training data from the whole domain (``"interpolation"``)
or from its first part along one input (``"extrapolation"``), the test set on a grid.

``PROBLEMS`` holds thirteen: first- and second-order ODEs (forced and unforced, known and
unknown source), the logistic equation, heat, wave, advection, Laplace and Poisson on a
2 x 1 rectangle, Fisher-KPP, Burgers and a bistable (Nagumo / Allen-Cahn type)
reaction-diffusion front.
"""

import math
from dataclasses import dataclass, field

import torch
from torch.distributions import constraints

from ..physics import Equation, Parameter
from .base import Dataset

__all__ = ["PROBLEMS", "Problem", "problem"]

D = torch.float64
SPLITS = ("interpolation", "extrapolation")


@dataclass
class Problem:
    r"""A physics-informed regression problem.

    :param str name: identifier.
    :param dict domain: ``{input name: (low, high)}`` in column order.
    :param solution: ``f(x) -> (n,)`` for ``x`` ``(n, d)`` (torch, differentiable).
    :param psi: the residual ``psi(f, x, **params)`` (the equation's left-hand side).
    :param dict truth: the true coefficients ``{name: value}``.
    :param tuple learned: names of the coefficients to learn (the others are fixed).
    :param str source: ``"zero"`` (``psi[f] = 0``), ``"gp"`` (an unknown source) or
        ``"known"`` (``psi[f] = g`` with ``g`` given by ``source_fn``).
    :param source_fn: the true source ``g(x) -> (n,)`` (for ``"gp"`` and ``"known"``).
    :param str split_input: the input along which ``"extrapolation"`` splits.
    :param float split_fraction: training on the first ``split_fraction`` of its range.
    :param int n_train: training points.
    :param float noise: noise standard deviation relative to the solution's spread.
    :param int grid: test points per input.
    :param dict constraints_: constraints of coefficients (default positive).
    :param lfm: ``{"equation": "ode" | "heat", ...}`` keyword arguments of
        :class:`~pyro_pidkl.models.LFM` where a latent force model applies.
    """

    name: str
    domain: dict
    solution: object
    psi: object
    truth: dict
    learned: tuple = ()
    source: str = "zero"
    source_fn: object = None
    split_input: str = None
    split_fraction: float = 0.4
    n_train: int = 40
    noise: float = 0.05
    grid: int = 200
    constraints_: dict = field(default_factory=dict)
    lfm: dict = None
    description: str = ""

    @property
    def input_names(self):
        return tuple(self.domain)

    def equation(self, start=0.5):
        r"""The equation with the ``learned`` coefficients started at ``start`` times the
        truth (off the truth, as a user who knows only the order of magnitude), the others
        fixed at the truth."""
        params = {}
        for name, value in self.truth.items():
            con = self.constraints_.get(name, constraints.positive)
            if name in self.learned:
                params[name] = Parameter(value * start, con)
            else:
                params[name] = Parameter(value, fixed=True)
        inputs = tuple(n for n in self.input_names)
        return Equation(self.psi, inputs=inputs, name=self.name, **params)

    def grid_points(self, n=None):
        """A product grid over the domain, ``(n^d, d)``."""
        d = len(self.domain)
        n = n or (self.grid if d == 1 else int(round(self.grid ** (1.0 / d) * 2)))
        axes = [torch.linspace(lo, hi, n, dtype=D) for lo, hi in self.domain.values()]
        return torch.cartesian_prod(*axes).reshape(-1, d)

    def _region(self, X, split):
        if split == "interpolation":
            return torch.ones(X.shape[0], dtype=torch.bool)
        j = self.input_names.index(self.split_input)
        lo, hi = self.domain[self.split_input]
        return X[:, j] <= lo + self.split_fraction * (hi - lo)

    def sample(self, split="extrapolation", seed=0):
        r"""Noisy training data from the split's training region, and the test set: the
        grid points outside that region (``"extrapolation"``) or all grid points
        (``"interpolation"``). ``f_test`` is the noise-free solution, ``y_test`` the
        solution plus noise of the same level.

        :returns: a :class:`~pyro_pidkl.datasets.base.Dataset` with ``f_test`` added."""
        if split not in SPLITS:
            raise ValueError(f"Expected split to be one of {SPLITS}; got {split!r}")
        g = torch.Generator().manual_seed(seed)
        d = len(self.domain)
        low = torch.tensor([lo for lo, _ in self.domain.values()], dtype=D)
        high = torch.tensor([hi for _, hi in self.domain.values()], dtype=D)
        if split == "extrapolation":
            j = self.input_names.index(self.split_input)
            high = high.clone()
            high[j] = low[j] + self.split_fraction * (high[j] - low[j])
        X = low + (high - low) * torch.rand(self.n_train, d, generator=g, dtype=D)
        grid = self.grid_points()
        with torch.no_grad():
            f_grid = self.solution(grid)
            scale = self.noise * float(f_grid.std())
            y = self.solution(X) + scale * torch.randn(self.n_train, generator=g, dtype=D)
        test = ~self._region(grid, split) if split == "extrapolation" else \
            torch.ones(grid.shape[0], dtype=torch.bool)
        X_test, f_test = grid[test], f_grid[test]
        y_test = f_test + scale * torch.randn(f_test.shape[0], generator=g, dtype=D)
        data = Dataset(name=f"{self.name}-{split}", X_train=X, y_train=y, X_test=X_test,
                       y_test=y_test, input_names=self.input_names, truth=dict(self.truth),
                       description=self.description)
        data.f_test, data.noise_sd = f_test.numpy(), scale
        return data


# -- solutions ---------------------------------------------------------------------------

def _ode1_source(x):
    # f' + B f - D = sin(2 pi t) exp(-t), B = D = 1, f(0) = 0.1 (the paper's 1stODE)
    t = x[:, 0]
    C = 0.1 - 1 + 1 / (2 * math.pi)
    return 1 - torch.exp(-t) * torch.cos(2 * math.pi * t) / (2 * math.pi) + C * torch.exp(-t)


def _ode1_forced(x, k=0.5, w=4.0, f0=1.0):
    # f' + k f = cos(w t), f(0) = 1
    t = x[:, 0]
    particular = (k * torch.cos(w * t) + w * torch.sin(w * t)) / (k * k + w * w)
    return (f0 - k / (k * k + w * w)) * torch.exp(-k * t) + particular


def _oscillator(x, omega=2.0, zeta=0.15, force=None):
    # f'' + 2 zeta omega f' + omega^2 f = cos(W t) (or 0), f(0) = 1, f'(0) = 0
    t = x[:, 0]
    wd = omega * math.sqrt(1 - zeta ** 2)
    if force is None:
        p0 = dp0 = 0.0
        particular = torch.zeros_like(t)
    else:
        W = force
        den = (omega ** 2 - W ** 2) ** 2 + (2 * zeta * omega * W) ** 2
        a, b = (omega ** 2 - W ** 2) / den, 2 * zeta * omega * W / den
        particular = a * torch.cos(W * t) + b * torch.sin(W * t)
        p0, dp0 = a, b * W
    c1 = 1 - p0
    c2 = (-dp0 + zeta * omega * c1) / wd
    return torch.exp(-zeta * omega * t) * (c1 * torch.cos(wd * t) + c2 * torch.sin(wd * t)) \
        + particular


def _logistic(x, r=1.5, f0=0.1):
    t = x[:, 0]
    return 1 / (1 + (1 / f0 - 1) * torch.exp(-r * t))


def _heat(x, alpha=0.05):
    s, t = x[:, 0], x[:, 1]
    return (torch.sin(math.pi * s) * torch.exp(-alpha * math.pi ** 2 * t)
            + 0.5 * torch.sin(3 * math.pi * s) * torch.exp(-9 * alpha * math.pi ** 2 * t))


def _wave(x, c=1.0):
    s, t = x[:, 0], x[:, 1]
    return (torch.sin(math.pi * s) * torch.cos(c * math.pi * t)
            + 0.3 * torch.sin(2 * math.pi * s) * torch.cos(2 * c * math.pi * t))


def _advection(x, v=0.5):
    s, t = x[:, 0], x[:, 1]
    return torch.exp(-(s - v * t - 0.5) ** 2 / (2 * 0.15 ** 2))


def _laplace(x):
    a, b = x[:, 0], x[:, 1]
    return (torch.exp(-a) * torch.sin(b)
            + torch.cos(math.pi * a / 2) * torch.cosh(math.pi * b / 2) / math.cosh(math.pi / 2))


def _poisson(x):
    a, b = x[:, 0], x[:, 1]
    return torch.sin(math.pi * a) * torch.sin(math.pi * b) + 0.5 * a * b


def _fisher_kpp(x, Dc=0.01, r=1.0, x0=0.6):
    # Ablowitz-Zeppetella travelling wave of f_t = D f_xx + r f (1 - f)
    s, t = x[:, 0], x[:, 1]
    k = math.sqrt(r / (6 * Dc))
    return 1 / (1 + torch.exp(k * (s - x0) - 5 * r * t / 6)) ** 2


def _burgers(x, nu=0.5, c=1.2):
    # Cole-Hopf: f_t + f f_x = nu f_xx, periodic in x on [0, 2 pi)
    s, t = x[:, 0], x[:, 1]
    decay = torch.exp(-nu * t)
    return 2 * nu * decay * torch.sin(s) / (c + decay * torch.cos(s))


def _nagumo(x, eps=0.1, a=0.25, x0=1.5):
    # f_t = eps^2 f_xx + f (1 - f)(f - a): 1 / (1 + exp((x - x0 - c t) / (sqrt 2 eps))), the
    # front moving at c = sqrt(2) eps (1/2 - a) (towards the f = 0 side for a < 1/2)
    s, t = x[:, 0], x[:, 1]
    c = math.sqrt(2) * eps * (0.5 - a)
    return 1 / (1 + torch.exp((s - x0 - c * t) / (math.sqrt(2) * eps)))


# -- the problems --------------------------------------------------------------------------

def _problems():
    unit = constraints.unit_interval
    out = [
        Problem("ode1_source", {"t": (0.0, 1.0)}, _ode1_source,
                lambda f, x, B, D: f.d("t") + B * f - D, {"B": 1.0, "D": 1.0}, ("B", "D"),
                source="gp", source_fn=lambda x: torch.sin(2 * math.pi * x[:, 0])
                * torch.exp(-x[:, 0]), split_input="t", lfm={"equation": "ode", "time": "t"},
                description="f' + B f - D = g(t), g unknown (the paper's 1stODE)"),
        Problem("ode1_forced", {"t": (0.0, 6.0)}, _ode1_forced,
                lambda f, x, k: f.d("t") + k * f - torch.cos(4 * x["t"]), {"k": 0.5}, ("k",),
                split_input="t", lfm={"equation": "ode", "time": "t"},
                description="f' + k f = cos(4 t), forcing known"),
        Problem("oscillator", {"t": (0.0, 6.0)}, _oscillator,
                lambda f, x, omega, zeta: f.d("t", "t") + 2 * zeta * omega * f.d("t")
                + omega ** 2 * f, {"omega": 2.0, "zeta": 0.15}, ("omega", "zeta"),
                split_input="t", constraints_={"zeta": unit},
                description="f'' + 2 zeta omega f' + omega^2 f = 0"),
        Problem("oscillator_forced", {"t": (0.0, 6.0)},
                lambda x: _oscillator(x, force=1.3),
                lambda f, x, omega, zeta: f.d("t", "t") + 2 * zeta * omega * f.d("t")
                + omega ** 2 * f - torch.cos(1.3 * x["t"]), {"omega": 2.0, "zeta": 0.15},
                ("omega", "zeta"), split_input="t", constraints_={"zeta": unit},
                description="f'' + 2 zeta omega f' + omega^2 f = cos(1.3 t), forcing known"),
        Problem("logistic", {"t": (0.0, 8.0)}, _logistic,
                lambda f, x, r: f.d("t") - r * f * (1 - f), {"r": 1.5}, ("r",),
                split_input="t", description="f' = r f (1 - f) (nonlinear)"),
        Problem("heat", {"x": (0.0, 1.0), "t": (0.0, 1.0)}, _heat,
                lambda f, x, alpha: f.d("t") - alpha * f.d("x", "x"), {"alpha": 0.05},
                ("alpha",), split_input="t", n_train=100,
                lfm={"equation": "heat", "time": "t"}, description="f_t = alpha f_xx"),
        Problem("wave", {"x": (0.0, 1.0), "t": (0.0, 2.0)}, _wave,
                lambda f, x, c: f.d("t", "t") - c ** 2 * f.d("x", "x"), {"c": 1.0}, ("c",),
                split_input="t", n_train=100, description="f_tt = c^2 f_xx"),
        Problem("advection", {"x": (0.0, 2.0), "t": (0.0, 2.0)}, _advection,
                lambda f, x, v: f.d("t") + v * f.d("x"), {"v": 0.5}, ("v",),
                split_input="t", n_train=100, description="f_t + v f_x = 0"),
        Problem("laplace", {"x": (0.0, 2.0), "y": (0.0, 1.0)}, _laplace,
                lambda f, x: f.laplacian("x", "y"), {}, (), split_input="x",
                split_fraction=0.5, n_train=100,
                description="f_xx + f_yy = 0 on a 2 x 1 rectangle"),
        Problem("poisson", {"x": (0.0, 2.0), "y": (0.0, 1.0)}, _poisson,
                lambda f, x: f.laplacian("x", "y") + 2 * math.pi ** 2
                * torch.sin(math.pi * x["x"]) * torch.sin(math.pi * x["y"]), {}, (),
                split_input="x", split_fraction=0.5, n_train=100,
                description="f_xx + f_yy = -2 pi^2 sin(pi x) sin(pi y), source known"),
        Problem("fisher_kpp", {"x": (0.0, 2.0), "t": (0.0, 2.0)}, _fisher_kpp,
                lambda f, x, D, r: f.d("t") - D * f.d("x", "x") - r * f * (1 - f),
                {"D": 0.01, "r": 1.0}, ("D", "r"), split_input="t", n_train=100,
                description="f_t = D f_xx + r f (1 - f) (nonlinear)"),
        Problem("burgers", {"x": (0.0, 2 * math.pi), "t": (0.0, 2.0)}, _burgers,
                lambda f, x, nu: f.d("t") + f * f.d("x") - nu * f.d("x", "x"), {"nu": 0.5},
                ("nu",), split_input="t", n_train=100,
                description="f_t + f f_x = nu f_xx (nonlinear)"),
        Problem("allen_cahn", {"x": (0.0, 2.0), "t": (0.0, 20.0)}, _nagumo,
                lambda f, x, eps, a: f.d("t") - eps ** 2 * f.d("x", "x")
                - f * (1 - f) * (f - a), {"eps": 0.1, "a": 0.25}, ("eps", "a"),
                split_input="t", n_train=100, constraints_={"a": unit},
                description="f_t = eps^2 f_xx + f (1 - f)(f - a) (bistable, nonlinear)"),
    ]
    return {p.name: p for p in out}


PROBLEMS = _problems()


def problem(name):
    """The :class:`Problem` called ``name`` (one of ``PROBLEMS``)."""
    try:
        return PROBLEMS[name]
    except KeyError:
        raise ValueError(f"Unknown problem {name!r}; expected one of {tuple(PROBLEMS)}") \
            from None
