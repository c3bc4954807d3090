"""The paper's baselines on the same machinery: SKL (SE-ARD GP), DKL (no physics) and LFM
(latent force models)."""

from .models.baselines import DKL, SKL
from .models.lfm import LFM

__all__ = ["DKL", "LFM", "SKL"]
