"""Equations written as plain Python over a solution and its derivatives by input name."""

from .derivatives import Field, Inputs
from .equation import Equation, Parameter
from .linearise import JetField, Linearisation, linearise
from .library import burgers_1d, diffusion_2d, first_order_ode, heat_1d, poisson_2d

__all__ = [
    "Equation",
    "Field",
    "Inputs",
    "JetField",
    "Linearisation",
    "Parameter",
    "burgers_1d",
    "diffusion_2d",
    "first_order_ode",
    "heat_1d",
    "linearise",
    "poisson_2d",
]
