"""The systems benchmark's ODEs in JAX (``s`` the state, ``t`` the time, ``k`` the rates by
name), for the peers that run in their own JAX environments (``numpyro_ode.py``,
``probdiffeq_ode.py``); this library is not imported here."""

import jax.numpy as jnp


def fitzhugh_nagumo(s, t, k):
    V, R = s[0], s[1]
    return jnp.stack([k["c"] * (V - V ** 3 / 3 + R), -(V - k["a"] + k["b"] * R) / k["c"]])


def lotka_volterra(s, t, k):
    x, y = s[0], s[1]
    return jnp.stack([k["alpha"] * x - k["beta"] * x * y, k["delta"] * x * y - k["gamma"] * y])


def sir(s, t, k):
    S, i = s[0], s[1]
    return jnp.stack([-k["beta"] * S * i, k["beta"] * S * i - k["gamma"] * i])


def hes1_log(s, t, k):
    P, M, H = jnp.exp(s[0]), jnp.exp(s[1]), jnp.exp(s[2])
    return jnp.stack([-k["a"] * H + k["b"] * M / P - k["c"],
                      -k["d"] + k["e"] / (1 + P ** 2) / M,
                      -k["a"] * P + k["g"] / (1 + P ** 2) / H - k["h"]])


def lotka_volterra_log(s, t, k):
    """Lotka-Volterra for the logs of the populations (log-normal counts)."""
    u, v = s[0], s[1]
    return jnp.stack([k["alpha"] - k["beta"] * jnp.exp(v), -k["gamma"] + k["delta"] * jnp.exp(u)])


SYSTEMS = {"fitzhugh_nagumo": fitzhugh_nagumo, "lotka_volterra": lotka_volterra, "sir": sir,
           "hes1": hes1_log, "lotka_volterra_log": lotka_volterra_log}
