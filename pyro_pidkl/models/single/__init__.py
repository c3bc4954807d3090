"""The GP conditioned on one equation (:class:`PhysicsConditionedGP`): the model, its joint
of data and equation, its prediction."""

from .model import PhysicsConditionedGP

__all__ = ["PhysicsConditionedGP"]
