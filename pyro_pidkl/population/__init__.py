"""Population models: many groups (subjects), one law, coefficients that vary over the groups
(shared, random, per group), fitted by the Laplace (FOCE) marginal likelihood or drawn by
NUTS."""

from .effects import PerGroup, Random, Shared
from .foce import fit_population
from .groups import GroupedData
from .model import PopulationODE
from .result import PopulationFit
from .sampling import PopulationSamples, sample_population
from .simulate import simulate_population

__all__ = ["GroupedData", "PerGroup", "PopulationFit", "PopulationODE", "PopulationSamples",
           "Random", "Shared", "fit_population", "sample_population", "simulate_population"]
