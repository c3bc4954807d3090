"""Equations written as plain Python over a solution and its derivatives by input name."""

from .collocation import boundary_points, box_bounds, collocation_points
from .condition import Condition
from .derivatives import Field, Inputs
from .domain import Box, Gaussian
from .equation import Equation, Parameter
from .geometry import Difference, Disk, Polygon, Rectangle, Shape, TimeProduct
from .linearise import JetField, Linearisation, is_linear, linearise
from .system import EquationSystem, is_linear_system, linearise_system
from .ode import ExplicitODE, explicit_ode
from .scalar_ode import EquationODE, equation_ode
from .posterior_draw import DrawField, PosteriorDraw
from .library import burgers_1d, diffusion_2d, first_order_ode, heat_1d, poisson_2d
from .term import PhysicsTerm
from .system_term import SystemPhysicsTerm

__all__ = [
    "EquationODE", "equation_ode",
    "Box",
    "DrawField",
    "PosteriorDraw",
    "Condition",
    "Difference",
    "Disk",
    "Equation",
    "EquationSystem",
    "ExplicitODE",
    "Gaussian",
    "Field",
    "Inputs",
    "JetField",
    "Linearisation",
    "Parameter",
    "PhysicsTerm",
    "Polygon",
    "Rectangle",
    "Shape",
    "SystemPhysicsTerm",
    "TimeProduct",
    "boundary_points",
    "box_bounds",
    "burgers_1d",
    "collocation_points",
    "diffusion_2d",
    "explicit_ode",
    "first_order_ode",
    "heat_1d",
    "is_linear",
    "is_linear_system",
    "linearise",
    "linearise_system",
    "poisson_2d",
]
