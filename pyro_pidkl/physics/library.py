r"""Built-in equations. Each takes the names of its inputs in the data and its parameters
(an initial value, learned under a positivity constraint, or a
:class:`~pyro_pidkl.physics.equation.Parameter`).

========================  =============================================================
``first_order_ode``       :math:`f_t + B f - D = g(t)`
``heat_1d``               :math:`f_t - \alpha f_{xx} = g(x, t)`
``poisson_2d``            :math:`f_{xx} + f_{yy} = g(x, y)`
``diffusion_2d``          :math:`f_t - \alpha (f_{xx} + f_{yy}) = g(x, y, t)`
``burgers_1d``            :math:`f_t + f f_x - \nu f_{xx} = g(x, t)`
========================  =============================================================
"""

from .equation import Equation

__all__ = ["burgers_1d", "diffusion_2d", "first_order_ode", "heat_1d", "poisson_2d"]


def first_order_ode(B=1.0, D=1.0, t="t"):
    r"""First-order ODE :math:`f_t + B f - D = g(t)` (the paper's 1stODE, motion capture)."""
    def psi(f, x, B, D):
        return f.d(t) + B * f - D
    return Equation(psi, inputs=(t,), name="first_order_ode", B=B, D=D)


def heat_1d(alpha=1.0, x="x", t="t"):
    r"""Heat / diffusion equation :math:`f_t - \alpha f_{xx} = g(x, t)`."""
    def psi(f, X, alpha):
        return f.d(t) - alpha * f.d(x, x)
    return Equation(psi, inputs=(x, t), name="heat_1d", alpha=alpha)


def poisson_2d(x="x", y="y"):
    r"""Poisson equation :math:`f_{xx} + f_{yy} = g(x, y)` (Jura: over the coordinates only)."""
    def psi(f, X):
        return f.laplacian(x, y)
    return Equation(psi, inputs=(x, y), name="poisson_2d")


def diffusion_2d(alpha=1.0, x="x", y="y", t="t"):
    r"""Diffusion in the plane :math:`f_t - \alpha (f_{xx} + f_{yy}) = g(x, y, t)` (PM2.5)."""
    def psi(f, X, alpha):
        return f.d(t) - alpha * f.laplacian(x, y)
    return Equation(psi, inputs=(x, y, t), name="diffusion_2d", alpha=alpha)


def burgers_1d(nu=0.1, x="x", t="t"):
    r"""Viscous Burgers :math:`f_t + f f_x - \nu f_{xx} = g(x, t)` (nonlinear)."""
    def psi(f, X, nu):
        return f.d(t) + f * f.d(x) - nu * f.d(x, x)
    return Equation(psi, inputs=(x, t), name="burgers_1d", nu=nu)
