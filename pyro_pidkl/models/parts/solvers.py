r"""How the joint of the data and the equation is solved: the solver part of a conditioned
model.

* :class:`Dense`: the dense joint of data and collocation values, :math:`O((M + N)^3)`;
* :class:`Inducing`: the data's likelihood by Titsias's collapsed variational bound on
  inducing values at ``count`` of the data inputs (:class:`~pyro_pidkl.gp.inducing.InducingJoint`,
  :math:`O(N m^2)`); ``count="auto"`` starts at 256 and doubles while the bound's trace term
  exceeds one nat;
* ``"auto"``: the bound above 2,000 data, else dense.

* :class:`SparseCholesky`: the settings of the sparse Cholesky solver of a PDE with many
  collocation points (:class:`~pyro_pidkl.models.SparseCholeskySolver`: a solver of its own,
  which takes them; not yet one the conditioned GP chooses).

An explicit ODE in :math:`O(N)` is :class:`~pyro_pidkl.StateSpaceGP`, a model of its own.
"""

from dataclasses import dataclass
from typing import Any, ClassVar

from ...checks import is_count
from ...gp.sparse_cholesky import DENSE_LIMIT

__all__ = ["Dense", "Inducing", "SparseCholesky", "as_solver"]


@dataclass(frozen=True)
class Dense:
    """The dense joint."""

    data_likelihood: ClassVar[str] = "exact"


@dataclass(frozen=True)
class Inducing:
    """Titsias's bound on ``count`` inducing points (``"auto"``: grown while it is loose)."""

    count: Any = "auto"
    data_likelihood: ClassVar[str] = "inducing"

    def __post_init__(self):
        if not (self.count == "auto" or is_count(self.count)):
            raise ValueError(f"Expected the inducing points' count to be 'auto' or an integer "
                             f">= 1; got {self.count!r}")


@dataclass(frozen=True)
class SparseCholesky:
    """The sparse Cholesky solver's numerical settings.

    :param float rho: radius of the covariance's factor (accuracy of the products); default
        :func:`~pyro_pidkl.models.conditioning.sparse_solver.default_radius` of 4 (the radius of Chen, Owhadi & Schaefer in 2-D).
    :param float rho_preconditioner: radius of the preconditioner's factor (CG steps);
        default :func:`~pyro_pidkl.models.conditioning.sparse_solver.default_radius` of 6.
    :param float nugget: added to each measurement's variance, relative to it: the
        measurements are exact, so as small as float64 factorisations allow (a supernode
        that does not factor gets more, :class:`~pyro_pidkl.gp.sparse_cholesky.
        SparseInverseCholesky`); a larger one regularises the factor away from the model
        and costs accuracy on fine grids.
    :param float tol: Gauss-Newton stops when the solution at the points changes by less.
    :param int max_iterations: Gauss-Newton steps at most.
    :param float cg_tol: relative residual of the last CG solves (the first ones stop at
        1e-2 times the last Gauss-Newton step, at most 1e-3).
    :param int cg_max_iterations: CG iterations per solve at most (a warning beyond).
    :param int learn_points: collocation points of the subset the lengthscale is learned on.
    :param float preconditioner_tol: a sparse preconditioner is rebuilt when a column of the
        linearised operator's weights moves by more than this, relative to its size (an
        exact one every Gauss-Newton step).
    :param float lam: the factors' supernodes' level ratio
        (:func:`~pyro_pidkl.gp.sparse_cholesky.supernodes`; ``None``: one per point).
    :param float alpha: the supernodes' centre spacing in units of the radius.
    :param int dense_limit: the covariance's factor of at most this many measurements is the
        exact one (:data:`~pyro_pidkl.gp.sparse_cholesky.DENSE_LIMIT`; ``0``: sparse unless
        its supernodes would cost more); the preconditioner is exact up to
        :attr:`~pyro_pidkl.models.SparseCholeskySolver.PRECONDITIONER_DENSE_LIMIT` measurements (and this), else where that is
        cheaper than its supernodes.
    """

    rho: float = None
    rho_preconditioner: float = None
    nugget: float = 1e-14
    tol: float = 1e-6
    max_iterations: int = 20
    cg_tol: float = 1e-8
    cg_max_iterations: int = 1000
    learn_points: int = 600
    preconditioner_tol: float = 0.1
    lam: float = 1.5
    alpha: float = 1.0
    dense_limit: int = DENSE_LIMIT


def as_solver(spec, data_likelihood=None, inducing=None):
    """``(data_likelihood, inducing)`` from a solver part or ``"auto"`` / ``"dense"`` /
    ``"inducing"``, or from the models' older keywords ``data_likelihood`` and
    ``inducing``."""
    if data_likelihood is not None or inducing is not None:
        if spec != "auto":
            raise ValueError(f"Expected the solver as solver= or as data_likelihood= / "
                             f"inducing=, not both; got solver={spec!r}")
        kind = "auto" if data_likelihood is None else data_likelihood
        if kind not in ("auto", "exact", "inducing"):
            raise ValueError(f"Expected data_likelihood to be 'auto', 'exact' or 'inducing'; "
                             f"got {kind!r}")
        return kind, "auto" if inducing is None else inducing
    if isinstance(spec, str) and spec in ("auto", "dense", "inducing"):
        return {"dense": "exact"}.get(spec, spec), "auto"
    if isinstance(spec, Dense):
        return "exact", "auto"
    if isinstance(spec, Inducing):
        return "inducing", spec.count
    raise ValueError(f"Expected solver to be 'auto', 'dense', 'inducing', pk.Dense() or "
                     f"pk.Inducing(count); got {spec!r}")
