"""The benchmarks' ODEs in JAX (``s`` the state, ``t`` the time, ``k`` the rates by name):
the systems benchmark's four (``SYSTEMS``) and a random problem's
(:func:`random_vector_field`), for the peers that run in their own JAX environments
(``numpyro_ode.py``, ``numpyro_random.py``, ``probdiffeq_ode.py``, ``probdiffeq_random.py``);
this library is not imported here."""

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


def random_vector_field(spec):
    """``f(s, t, k)`` of the problem's family (``k`` a dict of every coefficient)."""
    fam = spec["family"]
    if fam == "growth":
        nu = spec["nu"]
        if spec["law"] == "gompertz":
            return lambda s, t, k: jnp.stack([k["r"] * s[0] * jnp.log(k["K"] / s[0])])
        return lambda s, t, k: jnp.stack([k["r"] * s[0] * (1 - (s[0] / k["K"]) ** nu)])
    if fam == "oscillator":
        A, w = spec["A"], spec["w"]
        if spec["law"] == "polynomial":
            return lambda s, t, k: jnp.stack([s[1], -k["c"] * s[1] - k["k"] * s[0]
                                              - k["b"] * s[0] ** 3 + A * jnp.cos(w * t)])
        return lambda s, t, k: jnp.stack([s[1], -k["c"] * s[1] - k["w2"] * jnp.sin(s[0])
                                          + A * jnp.cos(w * t)])
    if fam == "epidemic":
        M = spec["M"]
        return lambda s, t, k: jnp.stack([-k["beta"] * s[0] * jnp.exp(s[1]) / M,
                                          k["beta"] * s[0] - k["gamma"]])
    reactions, S = spec["reactions"], spec["species"]

    def network(s, t, k):
        d = [0.0] * S
        for j, (a, b) in enumerate(reactions):
            v = k[f"k{j}"]
            for i in a:
                v = v * s[i]
            for i in a:
                d[i] = d[i] - v
            for i in b:
                d[i] = d[i] + v
        return jnp.stack([jnp.asarray(x) + 0.0 * s[0] for x in d])
    return network
