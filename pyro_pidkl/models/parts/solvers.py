r"""How the joint of the data and the equation is solved: the solver part of a conditioned
model.

* :class:`Dense`: the dense joint of data and collocation values, :math:`O((M + N)^3)`;
* :class:`Inducing`: the data's likelihood by Titsias's collapsed variational bound on
  inducing values at ``count`` of the data inputs (:class:`~pyro_pidkl.gp.inducing.InducingJoint`,
  :math:`O(N m^2)`); ``count="auto"`` starts at 256 and doubles while the bound's trace term
  exceeds one nat;
* ``"auto"``: the bound above 2,000 data, else dense.

A PDE with many collocation points is solved by sparse Cholesky factors
(:class:`~pyro_pidkl.models.SparseCholeskySolver`) and an explicit ODE in :math:`O(N)` by
:class:`~pyro_pidkl.StateSpaceGP`: models of their own, not yet parts.
"""

from dataclasses import dataclass
from typing import Any, ClassVar

from ...checks import is_count

__all__ = ["Dense", "Inducing", "as_solver"]


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
