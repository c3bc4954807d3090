r"""The Hudson's Bay Company's lynx and snowshoe hare pelts, 1900-1920 (thousands per year):
the record the Stan case study "Predator-Prey Population Dynamics: the Lotka-Volterra model
in Stan" (B. Carpenter, 2018) and NumPyro's predator-prey example fit, held here so that
nothing outside the library is needed.

The published posterior of the Lotka-Volterra rates (log-normal noise,
:math:`u' = (\alpha - \beta v) u`, :math:`v' = (-\gamma + \delta u) v`, ``u`` hare, ``v``
lynx) is :data:`REFERENCE_POSTERIOR`: NumPyro's NUTS (1000 + 1000, dense mass matrix) on
these values, mean and 90% interval.
"""

import torch

__all__ = ["LYNX_HARE", "REFERENCE_POSTERIOR", "lynx_hare"]

#: ``(year, lynx, hare)`` rows
LYNX_HARE = (
    (1900, 4.0, 30.0), (1901, 6.1, 47.2), (1902, 9.8, 70.2), (1903, 35.2, 77.4),
    (1904, 59.4, 36.3), (1905, 41.7, 20.6), (1906, 19.0, 18.1), (1907, 13.0, 21.4),
    (1908, 8.3, 22.0), (1909, 9.1, 25.4), (1910, 7.4, 27.1), (1911, 8.0, 40.3),
    (1912, 12.3, 57.0), (1913, 19.5, 76.6), (1914, 45.7, 52.3), (1915, 51.1, 19.5),
    (1916, 29.7, 11.2), (1917, 15.8, 7.6), (1918, 9.7, 14.6), (1919, 10.1, 16.2),
    (1920, 8.6, 24.7),
)

#: NumPyro's posterior of the rates on :data:`LYNX_HARE`: ``{name: (mean, low 5%, high 95%)}``
REFERENCE_POSTERIOR = {"alpha": (0.547, 0.451, 0.652), "beta": (0.0278, 0.0215, 0.0352),
                       "gamma": (0.799, 0.667, 0.953), "delta": (0.0241, 0.0189, 0.0301)}


def lynx_hare(dtype=torch.float64):
    """The record as tensors: ``(t, hare, lynx)``, ``t`` in years since 1900, each
    ``(21,)``."""
    table = torch.tensor(LYNX_HARE, dtype=dtype)
    return table[:, 0] - 1900.0, table[:, 2], table[:, 1]
