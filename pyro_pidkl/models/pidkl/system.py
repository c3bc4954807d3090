r"""PI-DKL for a system of equations: one deep-kernel GP per output and the system's physics
term on their posterior draws.

Each output :math:`f_c` has its own deep-kernel GP on its own data (independent a priori and
given the hyperparameters), and the collapsed ELBO of PI-DKL becomes

.. math::
    \mathcal{L} = \sum_{c=1}^{C} \log \mathcal{N}(y_c \mid 0, K_c + \sigma_c^2 I)
        + \gamma\, \mathbb{E}_{p(Z)} \mathbb{E}_{p(\epsilon)} \sum_{e=1}^{E}
          \log \mathcal{N}\big(h_e(Z, \epsilon) \mid 0, \kappa_e(Z, Z)\big),

:math:`h_e = \psi_e[f_{1,\epsilon_1}, \dots, f_{C,\epsilon_C}](Z)`
(:class:`~pyro_pidkl.physics.system_term.SystemPhysicsTerm`). As for one equation, the physics
term shapes the kernels, noises and the system's coefficients; a prediction is each output's
GP posterior given its own data. PI-DKL pushes a *posterior* draw of every output through the
system, so every output needs data: for an output nobody measured, use
:class:`~pyro_pidkl.models.ConditionedSystemGP`, which conditions on the equations.
"""

import functools
import warnings
import math

import pyro
import torch
from pyro.nn import PyroModule, pyro_method

from ...gp.standardise import Standardizer
from ...kernels.deep import dkl_kernel, feature_map
from ...kernels.features import smoothness_order
from ...physics.system import EquationSystem
from ...physics.system_term import SystemPhysicsTerm
from ...checks import UnfittedModelWarning, warn_if_interrupted
from .exact_gp import ExactGP
from ...physics.observations import split_by_output

__all__ = ["SystemPIDKL"]


class SystemPIDKL(PyroModule):
    r"""PI-DKL for an :class:`~pyro_pidkl.physics.EquationSystem` (module docstring).

    :param system: the system; its unknown coefficients are learned as point estimates.
    :param data: ``{output: (X_c, y_c)}`` or ``(X, Y)`` with ``NaN`` where not observed
        (:func:`~pyro_pidkl.physics.observations.split_by_output`); every output needs at
        least two observations.
    :param input_names: the inputs' names (default the system's).
    :param gamma, m, domain, source_inputs, draw, source_jitter: the physics term's
        (:class:`~pyro_pidkl.physics.system_term.SystemPhysicsTerm`).
    :param feature_dim, skip_inputs, seed: each output's deep kernel
        (:func:`~pyro_pidkl.kernels.dkl_kernel`; output ``c``'s network is seeded with
        ``seed + c``).
    Other keyword arguments go to every output's :class:`~pyro_pidkl.models.ExactGP`
    (``noise``, ``noise_floor``, ``mean``, ...).

    Sites of :meth:`model`: ``data`` factor, ``Z`` ``(m, d)``, ``eps`` ``(C,)``,
    ``physics`` factor.
    """

    #: the latent sites its guide draws from their priors
    prior_sites = ("Z", "eps")
    #: the guide draws every latent site from its prior and learns nothing
    guide_is_prior = True

    def __init__(self, system, data, input_names=None, gamma=1.0, m=10, domain=None,
                 source_inputs="equation", draw="function", source_jitter=1e-6,
                 feature_dim=None, skip_inputs=False, seed=0, dtype=torch.float64, **kwargs):
        super().__init__()
        if not isinstance(system, EquationSystem):
            raise TypeError(f"Expected system to be a pyro_pidkl.physics.EquationSystem; got "
                            f"{type(system).__name__}")
        with_prior = [n for n, s in system.specs.items() if s.prior is not None]
        if with_prior:
            raise ValueError(f"Expected the system's coefficients without a prior for "
                             f"SystemPIDKL (learned as point estimates); {tuple(with_prior)} "
                             f"have one")
        parts, names = split_by_output(data, system.outputs, input_names or system.inputs,
                                       dtype)
        few = [o for o, (X, _) in zip(system.outputs, parts) if X.shape[0] < 2]
        if few:
            raise ValueError(f"Expected at least two observations of every output for "
                             f"SystemPIDKL (it pushes a posterior draw of each through the "
                             f"system); {tuple(few)} have fewer: use ConditionedSystemGP for "
                             f"an output nobody measured")
        self.system, self.input_names = system, names
        d = len(names)
        self.gps = PyroModule[torch.nn.ModuleList](
            [ExactGP(X, y, names, kernel=dkl_kernel(d, None, feature_dim, skip_inputs,
                                                    dtype=dtype, seed=seed + c),
                     dtype=dtype, **kwargs)
             for c, (X, y) in enumerate(parts)])
        # how often the outputs' draws can be differentiated (a ReLU network: once)
        self._max_order = min([smoothness_order(net) for net in
                               (feature_map(gp.kernel) for gp in self.gps) if net is not None],
                              default=math.inf)
        self._why = ("" if math.isinf(self._max_order) else
                     " because a feature network has a piecewise-linear or C1 activation; "
                     "use a smooth activation such as nn.Tanh or nn.SiLU")
        X_all = torch.cat([X for X, _ in parts])
        self.register_buffer("X", X_all)      # every output's inputs (the default domain)
        self.standardizer = Standardizer(X_all, torch.cat([y for _, y in parts]))
        num_equations = self._count_equations()
        self.num_equations = num_equations
        self.physics = SystemPhysicsTerm(system, gamma, m, domain, source_inputs, draw,
                                         source_jitter).attach(X_all, names,
                                                               self.standardizer,
                                                               num_equations)

    def _count_equations(self):
        """``E``: the system run once on smooth functions of the outputs' kernels (a bad
        system fails here, not after minutes of training)."""
        Z = self.X[:2]
        functions = {}
        for o, gp in zip(self.system.outputs, self.gps):
            U0 = gp.X_s[:3]
            st = gp.standardizer
            functions[o] = (lambda x, gp=gp, st=st, U0=U0:
                            gp.kernel(st.x_to_model(x), U0).sum(-1))
        with pyro.poutine.block():
            return int(self.system.residuals(functions, Z, self.input_names).shape[0])

    @pyro_method
    def model(self):
        # log p(y_c | X_c) = log N(y_c | c, K_c + s_c^2 I) for each output: independent GPs
        posteriors = [gp.posterior() for gp in self.gps]
        pyro.factor("data", sum(p.log_marginal() for p in posteriors))
        # Z ~ p(Z), eps ~ N(0, I_C), gamma sum_e log N(psi_e[f_eps](Z) | 0, kappa_e(Z, Z))
        self.physics.factor([functools.partial(gp.posterior_draw, p)
                             for gp, p in zip(self.gps, posteriors)],
                            self._max_order, self._why)
        return posteriors

    @pyro_method
    def guide(self):
        """``Z`` and ``eps`` from their priors; kernels, noises and coefficients are point
        estimates."""
        self.physics.guide()

    def forward(self, Xnew, noiseless=True):
        r"""Each output's posterior mean and variance at ``Xnew`` ``(P, d)``, user units.

        :returns: ``(mean (P, C), var (P, C))``, columns in the system's output order."""
        warn_if_interrupted(self)
        with warnings.catch_warnings():         # said once, of the system, not per output
            warnings.simplefilter("ignore", UnfittedModelWarning)
            out = [gp(Xnew, noiseless=noiseless) for gp in self.gps]
        return torch.stack([m for m, _ in out], -1), torch.stack([v for _, v in out], -1)

    def equation_parameters(self):
        """The system's coefficients ``{name: float or list}``."""
        return self.physics.equation_parameters()
