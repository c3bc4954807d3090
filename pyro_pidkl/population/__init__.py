"""Population models: many groups (subjects), one law, coefficients that vary over the groups
(shared, random, per group), fitted by the Laplace (FOCE) marginal likelihood."""

from .effects import PerGroup, Random, Shared
from .foce import fit_population
from .groups import GroupedData
from .model import PopulationODE
from .result import PopulationFit
from .simulate import simulate_population

__all__ = ["GroupedData", "PerGroup", "PopulationFit", "PopulationODE", "Random", "Shared",
           "fit_population", "simulate_population"]
