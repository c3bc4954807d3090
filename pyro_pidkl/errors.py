"""Exceptions raised by :mod:`pyro_pidkl`, each naming what was expected and what came."""


class PIDKLError(Exception):
    """Base class of the library's own errors."""


class NotPositiveDefiniteError(PIDKLError, RuntimeError):
    """A kernel matrix stayed non positive definite after the largest allowed jitter."""


class NonFiniteError(PIDKLError, ValueError):
    """A quantity computed from the parameters (kernel matrix, residual) is NaN or inf."""


class FitDivergedError(PIDKLError, RuntimeError):
    """The loss or its gradients became NaN/inf during a fit.

    The parameter update of the failing step is *not* applied, so the model keeps the
    parameters of the last finite step; ``history`` holds the losses seen so far, ``step``
    the failing step and ``cause`` the error that stopped it (if any).
    """

    def __init__(self, message, history=None, step=None, cause=None):
        super().__init__(message)
        self.history = [] if history is None else list(history)
        self.step, self.cause = step, cause


class SolverRefusedError(PIDKLError, RuntimeError):
    """A solver stopped because its method cannot solve this problem; ``result`` holds what
    it did up to then (its last iterate stays on the solver)."""

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


class ConvergenceWarning(UserWarning):
    """Gauss-Newton did not reach its tolerance."""


class BandApproximationWarning(UserWarning):
    """A prediction's band rests on a linearisation that its coefficients' uncertainty
    breaks (the delta method's second-order term is not small against its first)."""
