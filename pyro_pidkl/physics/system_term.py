r"""The PI-DKL physics term of a system: one posterior draw per output, one unknown source per
equation.

For a system :math:`\psi_e[f_1, \dots, f_C] = g_e` (:class:`~pyro_pidkl.physics.EquationSystem`)
whose sources :math:`g_e \sim GP(0, \kappa_e)` are unknown and independent, a posterior
function draw :math:`f_{c,\epsilon_c} = \mu_c + \epsilon_c \sqrt{v_c}` of every output is
pushed through the system at random collocation points :math:`Z \sim p(Z)`, and the model's
objective gains

.. math::
    \gamma\, \mathbb{E}_{p(Z)} \mathbb{E}_{p(\epsilon)} \sum_{e=1}^{E}
    \log \mathcal{N}\big(h_e(Z, \epsilon) \mid 0, \kappa_e(Z, Z)\big),
    \qquad h_e(Z, \epsilon) = \psi_e[f_{1,\epsilon_1}, \dots, f_{C,\epsilon_C}](Z),

:math:`\epsilon \sim \mathcal{N}(0, I_C)` (one per output's draw). In Pyro: the sample sites
``Z`` ``(..., m, d)`` and ``eps`` ``(..., C)`` whose guide is their prior, and one factor
site (``physics``), as :class:`~pyro_pidkl.physics.PhysicsTerm` for one equation.
"""

import math

import pyro
import pyro.distributions as dist
import torch
from pyro.nn import PyroModule

from ..checks import positive_int
from ..errors import NonFiniteError
from ..kernels.se import se_ard
from ..param_scope import own_parameters
from .derivatives import Field
from .domain import Box
from .equation import claim, source_columns
from .system import EquationSystem
from .term import gaussian_log_prob, physics_weight, source_gram

__all__ = ["SystemPhysicsTerm"]


class SystemPhysicsTerm(PyroModule):
    r"""The weighted physics factor of PI-DKL for a system (module docstring).

    :param system: an :class:`~pyro_pidkl.physics.EquationSystem`.
    :param float gamma: weight :math:`\gamma \ge 0`.
    :param int m: collocation points :math:`Z` per draw.
    :param domain: :math:`p(Z)`: a :class:`~pyro_pidkl.physics.Box` (default: the box of
        all the outputs' training inputs), in user units.
    :param source_inputs: inputs of each :math:`\kappa_e`: ``"equation"`` (default),
        ``"all"`` or a tuple of names.
    :param str draw: ``"function"`` (one :math:`\epsilon_c` per output's draw, the paper's)
        or ``"mean"`` (the posterior means; no ``eps`` site).
    :param float source_jitter: relative nugget added to each :math:`\kappa_e(Z, Z)`.
    """

    def __init__(self, system, gamma=1.0, m=10, domain=None, source_inputs="equation",
                 draw="function", source_jitter=1e-6):
        super().__init__()
        if not isinstance(system, EquationSystem):
            raise TypeError(f"Expected system to be a pyro_pidkl.physics.EquationSystem; got "
                            f"{type(system).__name__}")
        gamma = physics_weight(gamma)
        if draw not in ("function", "mean"):
            raise ValueError(f"Expected draw to be 'function' or 'mean'; got {draw!r}")
        self.system = claim(system, self)
        self.gamma, self.m = gamma, positive_int(m, "m (number of collocation points)")
        self.draw, self.source_jitter = draw, float(source_jitter)
        self._domain, self._source_inputs = domain, source_inputs
        self._plans = {}

    def attach(self, X, input_names, standardizer, num_equations):
        """Bind the term to its model: the inputs' names, the box of all the training inputs
        ``X`` ``(N, d)`` (the default domain), the standardisation the source kernels act
        in, and one SE-ARD source kernel per equation."""
        self.system.check_inputs(input_names)
        self.input_names = tuple(input_names)
        self.domain = (self._domain or Box()).resolve(X, self.input_names)
        cols = source_columns(self._source_inputs, self.system, self.input_names)
        self.source_kernels = PyroModule[torch.nn.ModuleList](
            [se_ard(len(self.input_names), cols, dtype=X.dtype).to(X.device)
             for _ in range(num_equations)])
        self.register_buffer("_source_cols", None if list(cols) == list(range(X.shape[1]))
                             else torch.tensor(cols, device=X.device), persistent=False)
        self._units = (standardizer,)     # a tuple: the model owns the module
        return self

    def sample_Z(self):
        r""":math:`Z \sim p(Z)`: the ``Z`` site ``(..., m, d)``."""
        return pyro.sample("Z", self.domain.distribution(self.m))

    def sample_eps(self):
        r""":math:`\epsilon \sim \mathcal{N}(0, I_C)`: the ``eps`` site ``(..., C)``; with
        ``draw="mean"`` zeros and no site."""
        like = self._units[0].x_loc
        zero = torch.zeros(len(self.system.outputs), dtype=like.dtype, device=like.device)
        if self.draw == "mean":
            return zero
        return pyro.sample("eps", dist.Normal(zero, 1.0, validate_args=False).to_event(1))

    def residuals(self, draws, Z, eps, max_order=math.inf, why=""):
        r""":math:`h_e(Z, \epsilon)` ``(..., E, m)``.

        :param draws: ``[draw_c]``, one per output in the system's order: ``draw_c(eps (n,))``
            is the output's posterior function draw, a function of user-unit points
            ``(n, d) -> (n,)`` (with a ``field`` method where it gives its own derivatives).
        """
        batch, d = Z.shape[:-1], Z.shape[-1]
        points = Z.reshape(-1, d)
        fields = {}
        with torch.enable_grad():
            for c, (name, draw) in enumerate(zip(self.system.outputs, draws)):
                f = draw(eps[..., c:c + 1].expand(batch).reshape(-1))
                plan = self._plans.get(name)
                if hasattr(f, "field"):
                    field = f.field(points, self.input_names, allowed=self.system.inputs,
                                    max_order=max_order, why=why, plan=plan)
                else:
                    x = points.detach().requires_grad_(True)
                    field = Field(f(x), x, self.input_names, allowed=self.system.inputs,
                                  max_order=max_order, why=why)
                fields[name] = field
            h = self.system.evaluate(fields, points, self.input_names)      # (E, n)
        for name, field in fields.items():
            self._plans[name] = frozenset(field.requested)
        return h.reshape(h.shape[0], *batch).movedim(0, -2)

    def source_covariance(self, e, Z):
        r""":math:`\kappa_e(Z, Z)` plus its relative nugget, ``(..., m, m)``."""
        return source_gram(self.source_kernels[e], self._units[0], self._source_cols, Z,
                           self.source_jitter)

    def log_prob(self, h, Z):
        r""":math:`\sum_e \log \mathcal{N}(h_e \mid 0, \kappa_e(Z, Z))` for ``h``
        ``(..., E, m)``: shape ``(...)``."""
        if not torch.isfinite(h).all():
            bad = int((~torch.isfinite(h)).sum())
            raise NonFiniteError(
                f"The residuals of system {self.system.name!r} are NaN/inf at {bad} of "
                f"{h.numel()} points (parameters: {self.equation_parameters()})")
        return sum(gaussian_log_prob(h[..., e, :], self.source_covariance(e, Z))
                   for e in range(h.shape[-2]))

    def factor(self, draws, max_order=math.inf, why=""):
        """The ``Z`` and ``eps`` sites and the ``physics`` factor for the outputs' posterior
        draws (:meth:`residuals`)."""
        # Z ~ p(Z): m collocation points where the system holds            (..., m, d)
        Z = self.sample_Z()
        # eps ~ N(0, I): one posterior function draw per output              (..., C)
        eps = self.sample_eps()
        # h_e = psi_e[f_1, ..., f_C](Z): the draws pushed through the system  (..., E, m)
        h = self.residuals(draws, Z, eps, max_order, why)
        # gamma sum_e log N(h_e | 0, kappa_e(Z, Z)): each equation's unknown source at Z
        pyro.factor("physics", self.gamma * self.log_prob(h, Z))

    def guide(self):
        """``Z`` and ``eps`` from their priors (their log p - log q cancels exactly)."""
        self.sample_Z()
        self.sample_eps()

    @own_parameters
    def equation_parameters(self):
        """The system's coefficients ``{name: float or list}``."""
        with torch.no_grad():
            return {name: getattr(self.system, name).detach().cpu().tolist()
                    for name in self.system.parameter_names}

    def extra_repr(self):
        return f"gamma={self.gamma}, m={self.m}, draw={self.draw!r}"
