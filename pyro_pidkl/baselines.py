"""The paper's baselines on the same machinery: SKL (SE-ARD GP) and DKL (no physics)."""

from .models.baselines import DKL, SKL

__all__ = ["DKL", "SKL"]
