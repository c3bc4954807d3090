"""The GPs conditioned on a system of equations (:class:`ConditionedSystemGP`): the model,
its joint, conditions, count likelihoods and gradient matching."""

from .model import ConditionedSystemGP

__all__ = ["ConditionedSystemGP"]
