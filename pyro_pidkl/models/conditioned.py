r"""A GP conditioned jointly on the data and on the equation at collocation points.

PI-DKL lets the equation reach the prediction only through the kernel's hyperparameters.
Here the equation is *data*: with the residual linearised around the current posterior
mean :math:`f_0` (exact for linear equations; Gauss-Newton for nonlinear ones, as in
Chen, Hosseini, Owhadi & Stuart 2021),

.. math::
    \psi[f](z) \approx b(z) + \sum_\alpha J_\alpha(z)\, \partial^\alpha f(z)
        =: b(z) + \mathcal{L} f(z),

the virtual observations :math:`\mathcal{L} f(Z) = g(Z) - b(Z)` at ``M`` collocation
points :math:`Z` are jointly Gaussian with :math:`y`:

.. math::
    \begin{bmatrix} y \\ \mathcal{L} f(Z) + \epsilon_r - g(Z) \end{bmatrix} \sim
    \mathcal{N}\left(0, \begin{bmatrix} K + \sigma^2 I & \mathcal{L}_{z'} k(X, Z) \\
      \mathcal{L}_z k(Z, X) & \mathcal{L}_z \mathcal{L}_{z'} k(Z, Z) + \Sigma_g + \rho^2\tau I
    \end{bmatrix}\right),

with the covariances of derivatives in closed form
(:class:`~pyro_pidkl.kernels.derivatives.DerivativeKernel`). The source :math:`g` is a
modelling choice: ``"zero"`` (the equation as written is the physics; :math:`\Sigma_g = 0`),
``"gp"`` (the paper's unknown source, :math:`\Sigma_g = \rho^2 s_g^2 R(Z, Z)` with an SE-ARD
correlation :math:`R` and a learned amplitude), or a known function ``g(x)``. The residual
noise :math:`\rho^2\tau` is relative to :math:`\rho^2`, the mean prior variance of
:math:`\mathcal{L} f` at :math:`Z`, so that ``residual_noise`` means the same for any
equation and units.

Kernel, noise, source and the equation's unknown coefficients maximise the data's marginal
likelihood under the GP conditioned on the equation (``objective="conditional"``, the
default),

.. math::
    \log p(y \mid \mathcal{L} f(Z) = g(Z) - b(Z))
        = \log p(y, \text{virtual}) - \log p(\text{virtual}),

which does not change when the equation is multiplied by a coefficient-dependent constant
(``psi`` and ``psi / omega**2`` state the same equation). The joint density
:math:`\log p(y) + \log p(\text{virtual} \mid y)` (``objective="joint"``) does: its
:math:`\log p(\text{virtual})` part rewards coefficients that shrink the operator, and on
a wave equation it drove the speed to ~0 (``docs/equations.md``). Predictions are the GP
posterior given the data and the virtual observations.
"""

import math

import pyro
import torch
from pyro.nn import PyroParam, pyro_method
from torch.distributions import constraints

from ..kernels.derivatives import DerivativeKernel, derivative_kernel_supported
from ..physics.domain import Box
from ..checks import equation_input_names, positive_int
from ..errors import NonFiniteError
from ..kernels.deep import deep_kernel
from ..kernels.se import se_ard
from ..kernels.features import MLP
from ..physics.equation import Equation, source_columns
from ..physics.linearise import linearise
from ..gp.posterior import cho_solve, jittered_cholesky, logdet
from ..param_scope import own_parameters
from .exact_gp import ExactGP

__all__ = ["PhysicsConditionedGP", "collocation_points"]

_DESIGNS = ("sobol", "grid", "random")


def collocation_points(domain, count, design="sobol", seed=0):
    r"""``count`` points in a resolved :class:`~pyro_pidkl.physics.domain.Box` (user units):
    ``"sobol"`` (scrambled Sobol, :class:`scipy.stats.qmc.Sobol`), ``"grid"`` (a product
    grid with :math:`\lceil count^{1/d} \rceil` points per input, so possibly more than
    ``count``) or ``"random"`` (uniform). Returns ``(M, d)``."""
    count = positive_int(count, "the number of collocation points")
    if design not in _DESIGNS:
        raise ValueError(f"Expected design to be one of {_DESIGNS}; got {design!r}")
    if not hasattr(domain, "low"):
        raise TypeError(f"Expected a resolved Box domain; got {domain!r}")
    low, high = domain.low, domain.high
    d, count = low.shape[0], int(count)
    if design == "sobol":
        from scipy.stats import qmc
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # balance properties need 2^k points
            u = torch.as_tensor(qmc.Sobol(d, scramble=True, seed=seed).random(count))
    elif design == "random":
        g = torch.Generator().manual_seed(seed)
        u = torch.rand(count, d, generator=g, dtype=torch.float64)
    else:
        n = math.ceil(count ** (1.0 / d) - 1e-9)
        axis = torch.linspace(0, 1, n, dtype=torch.float64)
        u = torch.cartesian_prod(*([axis] * d)).reshape(-1, d)
    return low + (high - low) * u.to(low.dtype)


class PhysicsConditionedGP(ExactGP):
    r"""A GP of :math:`f` conditioned on the data and on :math:`\psi[f](Z) = g(Z)`.

    :param X: ``(N, d)`` training inputs (user units).
    :param y: ``(N,)`` training targets.
    :param equation: a :class:`~pyro_pidkl.physics.Equation` (derivatives up to order two).
    :param input_names: names of the ``d`` inputs; required unless ``X`` has one column
        and the equation one input, or ``d`` equals the equation's inputs and they are given
        in the same order as in the equation (pass them whenever in doubt).
    :param kernel: ``"se"`` (default: SE-ARD on the standardised inputs), ``"deep"`` (the
        paper's deep kernel: SE on MLP features) or a :mod:`pyro.contrib.gp` kernel of either
        kind.
    :param collocation: the number of collocation points (default 200) or a ``(M, d)``
        tensor of them in user units.
    :param str design: ``"sobol"`` (default), ``"grid"`` or ``"random"``.
    :param domain: where the equation holds: a :class:`~pyro_pidkl.physics.domain.Box` (default:
        the data's box; give the whole domain to extrapolate).
    :param source: ``"zero"`` (default), ``"gp"``, or a callable ``g(x) -> (M,)`` taking an
        :class:`~pyro_pidkl.physics.derivatives.Inputs` (``x["t"]``) in user units.
    :param float residual_noise: :math:`\tau`, the residual variance relative to the prior
        variance of :math:`\mathcal{L} f` (default ``1e-4``: the equation binds, a 1%
        residual standard deviation).
    :param bool learn_residual_noise: learn :math:`\tau` (bounded below by
        ``residual_noise_floor``) instead of holding it.
    :param float source_variance: initial :math:`s_g^2` of the ``"gp"`` source (relative).
    :param source_prior: optional ``pyro.distributions`` prior on :math:`s_g^2` (added to
        the objective, a MAP estimate).
    :param source_inputs: inputs of the source kernel: ``"equation"`` (default) or names.
    :param int newton_steps: Gauss-Newton iterations at fixed hyperparameters before a
        prediction (nonlinear equations only).
    :param str objective: ``"conditional"`` (default: :math:`\log p(y \mid
        \text{virtual})`) or ``"joint"`` (:math:`\log p(y, \text{virtual})`).
    :param int seed: seed of the collocation design.
    :param feature_net: the feature map of ``kernel="deep"`` (default the paper's MLP).
    Other arguments as :class:`~pyro_pidkl.models.exact_gp.ExactGP`.

    Sites of :meth:`model`: the ``data`` factor (and, with ``objective="joint"``, the
    ``physics`` factor).
    """

    def __init__(self, X, y, equation, input_names=None, kernel="se", collocation=200,
                 design="sobol", domain=None, source="zero", residual_noise=1e-4,
                 learn_residual_noise=False, residual_noise_floor=1e-8, source_variance=0.1,
                 source_prior=None, source_inputs="equation", newton_steps=10, seed=0,
                 feature_net=None, objective="conditional", **kwargs):
        if not isinstance(equation, Equation):
            raise TypeError(f"Expected equation to be a pyro_pidkl.physics.Equation; got "
                            f"{type(equation).__name__}")
        if any(spec.prior is not None for spec in equation.specs.values()):
            raise ValueError("PhysicsConditionedGP learns equation parameters by the marginal "
                             "likelihood; declare them without a prior (coefficient_intervals() "
                             "gives a Laplace interval)")
        input_names = equation_input_names(X, input_names, equation)
        super().__init__(X, y, input_names, **kwargs)
        equation.check_inputs(self.input_names)
        self.equation = equation
        self.kernel = self._make_kernel(kernel, feature_net)
        self.domain = (domain or Box()).resolve(self.X, self.input_names)
        if not hasattr(self.domain, "low"):
            raise TypeError(f"Expected domain to be a Box; got {type(domain).__name__}")
        if isinstance(collocation, torch.Tensor) or hasattr(collocation, "shape"):
            Z, _ = _as_points(collocation, self.input_names, self.X.dtype)
        else:
            Z = collocation_points(self.domain, collocation, design, seed)
        self.register_buffer("Z", Z.to(self.X))
        self.register_buffer("Z_s", self.standardizer.x_to_model(self.Z))
        if not (residual_noise > 0 and math.isfinite(residual_noise)):
            raise ValueError(f"Expected residual_noise > 0; got {residual_noise}")
        if learn_residual_noise:
            if not residual_noise > residual_noise_floor:
                raise ValueError(f"Expected residual_noise ({residual_noise}) above "
                                 f"residual_noise_floor ({residual_noise_floor})")
            self.residual_noise = PyroParam(torch.tensor(float(residual_noise), dtype=self.X.dtype),
                                            constraints.greater_than(float(residual_noise_floor)))
        else:
            self.register_buffer("residual_noise",
                                 torch.tensor(float(residual_noise), dtype=self.X.dtype))
        self.source_kind, self.source_fn = self._source(source)
        if self.source_kind == "gp":
            cols = source_columns(source_inputs, self.equation, self.input_names)
            self.source_kernel = se_ard(self.input_dim, cols, dtype=self.X.dtype)
            self.source_kernel.variance = PyroParam(
                torch.tensor(float(source_variance), dtype=self.X.dtype), constraints.positive)
            self.source_prior = source_prior
        self.newton_steps = positive_int(newton_steps, "newton_steps", minimum=0)
        if objective not in ("conditional", "joint"):
            raise ValueError(f"Expected objective to be 'conditional' or 'joint'; got "
                             f"{objective!r}")
        self.objective = objective
        # which derivatives psi reads (index tuples), and the linearisation point f0 (a jet
        # in user units at Z): zero until the first step, then the last posterior mean
        probe = linearise(equation, {}, self.Z[:2], self.input_names)
        self.indices = sorted(probe.coefficients, key=lambda i: (len(i), i))
        if any(len(i) > 2 for i in self.indices):
            raise ValueError(f"Equation {equation.name!r} reads a derivative of order above two; "
                             "PhysicsConditionedGP supports orders up to two")
        self.linear = probe.linear
        self.f0 = {}

    # -- construction helpers ----------------------------------------------------------
    def _make_kernel(self, kernel, feature_net):
        if kernel == "se":
            return se_ard(self.input_dim, dtype=self.X.dtype)
        if kernel == "deep":
            net = feature_net or MLP(self.input_dim, 20, dtype=self.X.dtype)
            with torch.no_grad():
                width = net(self.X_s[:1]).shape[-1]
            return deep_kernel(net, width, dtype=self.X.dtype)
        if isinstance(kernel, str) or not derivative_kernel_supported(kernel):
            raise ValueError(f"Expected kernel to be 'se', 'deep', an RBF kernel or a "
                             f"Warping(RBF) deep kernel; got {kernel!r}")
        return kernel

    def _source(self, source):
        if source in ("zero", "gp"):
            return source, None
        if callable(source):
            return "known", source
        raise ValueError(f"Expected source to be 'zero', 'gp' or a callable g(x); got {source!r}")

    # -- the pieces of the model -------------------------------------------------------
    def _derivative_scale(self, idx):
        r""":math:`\partial^\alpha f_{user} = c_\alpha \partial^\alpha_u f_s`:
        :math:`c_\alpha = s_y / \prod_{a \in \alpha} s_{x,a}`."""
        return self.standardizer.derivative_scale([idx])[0]

    def linearise(self):
        r"""The equation at :math:`Z`, linearised around :math:`f_0` and written for the
        standardised GP :math:`f_s`: ``(w, b)`` with :math:`\psi[f](Z) \approx b + \sum_\alpha
        w_\alpha \partial^\alpha_u f_s(Z)` (``w`` ``{alpha: (M,)}``, ``b`` ``(M,)``)."""
        lin = linearise(self.equation, self.f0, self.Z, self.input_names)
        w = {idx: lin.coefficients[idx] * self._derivative_scale(idx)
             for idx in self.indices if idx in lin.coefficients}
        b = lin.offset
        if () in lin.coefficients:
            b = b + lin.coefficients[()] * self.standardizer.y_loc
        return w, b

    def source(self):
        r""":math:`g(Z)` for a known source, else zeros ``(M,)``."""
        if self.source_fn is None:
            return torch.zeros_like(self.Z[:, 0])
        from ..physics.derivatives import Inputs
        g = torch.as_tensor(self.source_fn(Inputs(self.Z, self.input_names)), dtype=self.Z.dtype)
        if g.dim() == 0:
            g = g.expand(self.Z.shape[0])
        if g.shape != self.Z.shape[:1]:
            raise ValueError(f"Expected the source to return shape ({self.Z.shape[0]},); got "
                             f"{tuple(g.shape)}")
        return g

    def joint(self, w, b):
        r"""The joint prior of :math:`[y; \mathcal{L}f(Z)]` and its Cholesky factor: a
        :class:`JointConditional`."""
        dk = DerivativeKernel(self.kernel, self.Z_s, self.Z_s, self.indices, self.indices)
        dx = DerivativeKernel(self.kernel, self.Z_s, self.X_s, self.indices, [()])
        N, M = self.X_s.shape[0], self.Z_s.shape[0]
        Kxx = self.kernel(self.X_s)
        K_Lx = sum(w[a][:, None] * dx(a, ()) for a in w)                       # (M, N)
        # L_z L_z' k, using d^a_z d^c_z' k(Z, Z) = (d^c_z d^a_z' k(Z, Z))^T
        order = sorted(w, key=lambda i: (len(i), i))
        half = sum(w[a][:, None] * w[c][None, :] * dk(a, c) * (0.5 if a == c else 1.0)
                   for i, a in enumerate(order) for c in order[i:])
        K_LL = half + half.T
        rho2 = K_LL.diagonal().mean().detach().clamp(min=1e-300)
        Sigma = self.residual_noise * torch.eye(M, dtype=Kxx.dtype, device=Kxx.device)
        if self.source_kind == "gp":
            Sigma = Sigma + self.source_kernel(self.Z_s)
        eye = torch.eye(N, dtype=Kxx.dtype, device=Kxx.device)
        A = torch.cat([torch.cat([Kxx + self.noise * eye, K_Lx.T], 1),
                       torch.cat([K_Lx, K_LL + rho2 * Sigma], 1)], 0)
        c = self.prior_mean()
        mean_L = w[()] * c if () in w else torch.zeros_like(b)
        obs = torch.cat([self.y_s - c, self.source() - b - mean_L])
        L, j = jittered_cholesky(A, self.jitter, self.max_jitter, return_jitter=True,
                                 what=f"{N + M} x {N + M} joint kernel matrix (data and "
                                      "equation)")
        if j:
            A = A + j * torch.eye(N + M, dtype=A.dtype, device=A.device)
        return JointConditional(A, L, obs, N, w, dk, dx, c)

    # -- the model -----------------------------------------------------------------------
    @pyro_method
    def model(self):
        # psi[f](Z) ~= b(Z) + sum_a w_a(Z) d^a f(Z): the equation linearised around the
        # last posterior mean f0 (exact when psi is linear; Gauss-Newton when it is not)
        w, b = self.linearise()
        # [y; L f(Z) - g(Z)] ~ N(0, [[K + s2 I, L'k], [L k, L L' k + Sigma_g + rho2 tau I]])
        joint = self.joint(w, b)
        if self.objective == "conditional":
            # log p(y | psi[f](Z) = g(Z)): the data under the GP conditioned on the equation
            pyro.factor("data", joint.log_prob_data_given_equation())
        else:
            # log p(y) + log p(psi[f](Z) = g(Z) | y): the joint density
            pyro.factor("data", joint.log_prob_data())
            pyro.factor("physics", joint.log_prob_physics())
        if self.source_kind == "gp" and self.source_prior is not None:
            pyro.factor("source_prior", self.source_prior.log_prob(self.source_kernel.variance))
        if not self.linear:
            self.f0 = self._user_jet(joint)              # next linearisation point (detached)
        return joint

    #: the guide has no latent sites and learns nothing
    guide_is_prior = True

    @pyro_method
    def guide(self):
        """No latent sites: kernel, noise, source and coefficients are point estimates."""

    # -- predictions -----------------------------------------------------------------------
    def _user_jet(self, joint):
        """The posterior mean's jet at Z in user units (detached), the next ``f0``."""
        with torch.no_grad():
            jet = joint.mean_jet()
            out = {}
            for idx, v in jet.items():
                v = v * self._derivative_scale(idx)
                out[idx] = v + self.standardizer.y_loc if idx == () else v
            return out

    def conditional(self):
        """The joint conditional at the current parameters, after ``newton_steps``
        Gauss-Newton iterations for a nonlinear equation (updates ``f0``)."""
        with torch.no_grad():
            steps = 1 if self.linear else max(self.newton_steps, 1)
            for _ in range(steps):
                joint = self.joint(*self.linearise())
                self.f0 = self._user_jet(joint)
            return joint

    def posterior(self):
        """Refused: the data-only GP posterior is not this model's; use ``model(X)`` or
        :meth:`conditional` (the posterior given the data and the equation)."""
        raise TypeError("PhysicsConditionedGP's posterior is conditioned on the equation as "
                        "well as the data: use model(X) or model.conditional(), not posterior()")

    def _predict(self, U, full_cov):
        joint = self.conditional()
        return joint.predict(self.kernel, U, self.Z_s, self.X_s, full_cov)

    @own_parameters
    def training_objective(self):
        """The log joint density :math:`\\log p(y) + \\log p(\\text{virtual} \\mid y)` at the
        current parameters (a float)."""
        with torch.no_grad():
            joint = self.conditional()
            return float(self._objective(joint))

    def _objective(self, joint):
        if self.objective == "conditional":
            return joint.log_prob_data_given_equation()
        return joint.log_prob_data() + joint.log_prob_physics()

    def equation_parameters(self):
        """Current equation parameters as ``{name: float or list}``."""
        with torch.no_grad():
            return {name: getattr(self.equation, name).detach().cpu().tolist()
                    for name in self.equation.parameter_names}

    @own_parameters
    def coefficient_intervals(self, prob=0.9, nuisance=True):
        r"""Laplace intervals for the learned equation coefficients.

        The negative log joint density :math:`-\log p(y, \text{virtual} \mid \theta,
        \eta)` is expanded to second order at the estimates, in the unconstrained
        coefficients :math:`\theta` and (``nuisance=True``, the default) the GP's own
        scalar parameters :math:`\eta` (kernel variance and lengthscales, noise, source;
        not a feature network's weights); the coefficients' covariance is the
        :math:`\theta` block of the inverse Hessian (the marginal of the Laplace
        approximation). A direction of zero or negative curvature is not identified: every
        coefficient that loads on it gets an infinite interval.

        :returns: ``{name: {"value", "lower", "upper", "sd"}}``: the central ``prob``
            interval mapped to the constrained space, ``sd`` in the unconstrained one.
        """
        names = [n for n, spec in self.equation.specs.items() if not spec.fixed]
        if not names:
            return {}
        with torch.no_grad():
            self.conditional()                     # converge the linearisation point
        theta = [getattr(self.equation, n + "_unconstrained") for n in names]
        eta = [p for name, p in self.named_parameters()
               if nuisance and not name.startswith("equation.") and "iwarping_fn" not in name
               and p.requires_grad]
        params = theta + eta
        joint = self.joint(*self.linearise())
        joint.closed_form = False                  # plain autograd: second derivatives
        loss = -self._objective(joint)
        grads = torch.autograd.grad(loss, params, create_graph=True, allow_unused=True)
        flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                          for g, p in zip(grads, params)])
        rows = []
        for i in range(flat.numel()):
            row = torch.autograd.grad(flat[i], params, retain_graph=True, allow_unused=True)
            rows.append(torch.cat([(r if r is not None else torch.zeros_like(p)).reshape(-1)
                                   for r, p in zip(row, params)]))
        H = torch.stack(rows).detach()
        evals, evecs = torch.linalg.eigh(0.5 * (H + H.T))
        bad = evals <= 1e-10 * evals.abs().max().clamp(min=1e-300)
        inv = torch.where(bad, torch.zeros_like(evals), 1 / evals)
        sizes = [t.numel() for t in theta]
        n_theta = sum(sizes)
        V = evecs[:n_theta]
        sd = ((V ** 2) @ inv).sqrt()
        loose = (V[:, bad].abs() > 1e-8).any(1) if bad.any() else torch.zeros_like(sd, dtype=bool)
        sd = torch.where(loose, torch.full_like(sd, math.inf), sd)
        z = torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + prob / 2)).item()
        out, k = {}, 0
        for n, t_raw, size in zip(names, theta, sizes):
            t = torch.distributions.transform_to(self.equation.specs[n].constraint)
            th, s = t_raw.detach().reshape(-1), sd[k:k + size]
            lo, hi = t(torch.nan_to_num(th - z * s)), t(torch.nan_to_num(th + z * s))
            out[n] = {"value": _tolist(t(th), size), "lower": _tolist(torch.minimum(lo, hi), size),
                      "upper": _tolist(torch.maximum(lo, hi), size), "sd": _tolist(s, size)}
            k += size
        return out


class JointConditional:
    r"""The joint Gaussian of the data and the virtual observations, factored once.

    ``A`` is the ``(N + M)`` joint covariance (differentiable), ``L`` its Cholesky factor,
    ``obs`` the observed vector :math:`[y_s - c;\; g(Z) - b(Z) - w_0 c]`, ``N`` the number
    of data rows. The log densities have closed-form gradients in ``A``
    (:func:`~pyro_pidkl.gp.posterior.cho_solve`, :func:`~pyro_pidkl.gp.posterior.logdet`) instead
    of autograd through the Cholesky factor.
    """

    def __init__(self, A, L, obs, N, w, dk, dx, prior_mean):
        self.A, self.L, self.obs, self.N, self.w, self.dk, self.dx = A, L, obs, N, w, dk, dx
        self.c = prior_mean
        self._weights = None
        #: closed-form gradients (training); False: plain autograd through the Cholesky
        #: factor (any order of derivatives, e.g. a Hessian)
        self.closed_form = True

    def _gaussian(self, K, L, v, Kinv=None):
        r""":math:`\log N(v \mid 0, K)` with closed-form gradients in ``K`` and ``v``."""
        if self.closed_form:
            a = cho_solve(K, v[:, None], L, Kinv)[:, 0]
            quad, half_logdet = (v * a).sum(), 0.5 * logdet(K, L, Kinv)
        else:
            white = torch.linalg.solve_triangular(L, v[:, None], upper=False)[:, 0]
            quad, half_logdet = white.pow(2).sum(), L.diagonal().log().sum()
        value = -0.5 * quad - half_logdet - 0.5 * v.shape[0] * math.log(2 * math.pi)
        if not torch.isfinite(value):
            raise NonFiniteError("The joint (data and equation) log density is NaN/inf")
        return value

    def log_prob_data(self):
        r""":math:`\log p(y)`: the data block (its factor is the top-left of ``L``)."""
        if getattr(self, "_lp_data", None) is None:
            N, P = self.N, self._inverse()
            Kinv = None
            if P is not None:   # (A_11)^-1 = P_11 - P_12 P_22^-1 P_21 (Schur; O(N^2 M))
                Kinv = P[:N, :N] - P[:N, N:] @ torch.linalg.solve(P[N:, N:], P[N:, :N])
            self._lp_data = self._gaussian(self.A[:N, :N], self.L[:N, :N], self.obs[:N], Kinv)
        return self._lp_data

    def _inverse(self):
        """:math:`P = A^{-1}` while gradients are recorded (their closed form needs it)."""
        if not torch.is_grad_enabled() or not self.closed_form:
            return None
        if getattr(self, "_P", None) is None:
            self._P = torch.cholesky_inverse(self.L.detach())
        return self._P

    def log_prob_virtual(self):
        r""":math:`\log p(\text{virtual})`: the prior density of the virtual observations
        (the bottom-right ``M x M`` block, its own Cholesky)."""
        if getattr(self, "_lp_virtual", None) is None:
            N = self.N
            A22 = self.A[N:, N:]
            L22 = jittered_cholesky(A22, 1e-10, 1e-2, what="virtual observations' covariance")
            Kinv = (torch.cholesky_inverse(L22.detach())
                    if torch.is_grad_enabled() and self.closed_form else None)
            self._lp_virtual = self._gaussian(A22, L22, self.obs[N:], Kinv)
        return self._lp_virtual

    def log_prob_data_given_equation(self):
        r""":math:`\log p(y \mid \text{virtual}) = \log p(y, \text{virtual}) - \log
        p(\text{virtual})`: the data's marginal likelihood under the GP conditioned on the
        equation. Unlike the joint density it does not change when the equation is
        multiplied by a coefficient-dependent constant."""
        joint = self._gaussian(self.A, self.L, self.obs, self._inverse())
        return joint - self.log_prob_virtual()

    def log_prob_physics(self):
        r""":math:`\log p(\text{virtual} \mid y) = \log p(y, \text{virtual}) - \log p(y)`."""
        return self._gaussian(self.A, self.L, self.obs, self._inverse()) - self.log_prob_data()

    def weights(self):
        r""":math:`A^{-1} \text{obs}` ``(N + M,)`` (not differentiated)."""
        if self._weights is None:
            with torch.no_grad():
                self._weights = torch.cholesky_solve(self.obs[:, None], self.L)[:, 0]
        return self._weights

    def mean_jet(self):
        r"""Posterior mean derivatives :math:`\partial^\alpha \mu_s(Z)` for the equation's
        indices (standardised units)."""
        a = self.weights()
        out = {}
        for idx in self.dk_indices():
            cross = torch.cat([self.dx(idx, ()),
                               sum(self.dk(idx, c) * self.w[c][None, :] for c in self.w)], 1)
            out[idx] = cross @ a + (self.c if idx == () else 0.0)
        return out

    def dk_indices(self):
        return sorted(self.w, key=lambda i: (len(i), i))

    def predict(self, kernel, U, Z_s, X_s, full_cov=False):
        r"""Posterior mean and variance (or covariance) of the standardised :math:`f` at
        ``U`` ``(P, d)`` given the data and the equation."""
        dz = DerivativeKernel(kernel, U, Z_s, [()], list(self.w))
        k_star = torch.cat([kernel(U, X_s),
                            sum(dz((), c) * self.w[c][None, :] for c in self.w)], 1)  # (P, N+M)
        mean = k_star @ self.weights() + self.c
        V = torch.linalg.solve_triangular(self.L, k_star.T, upper=False)
        if full_cov:
            return mean, kernel(U) - V.T @ V
        var = kernel(U, diag=True) - V.pow(2).sum(0)
        return mean, var.clamp(min=0)


def _tolist(t, size):
    t = t.detach().cpu()
    return t.item() if size == 1 and t.dim() <= 1 else t.tolist()


def _as_points(Z, input_names, dtype):
    Z = torch.as_tensor(Z, dtype=dtype)
    if Z.dim() == 1 and len(input_names) == 1:
        Z = Z[:, None]
    if Z.dim() != 2 or Z.shape[1] != len(input_names) or Z.shape[0] < 1:
        raise ValueError(f"Expected collocation points of shape (M, {len(input_names)}) for "
                         f"inputs {tuple(input_names)}; got {tuple(Z.shape)}")
    if not torch.isfinite(Z).all():
        raise ValueError("Expected finite collocation points; got NaN/inf")
    return Z, input_names
