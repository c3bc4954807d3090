r"""The terms manufactured problems are composed of (:mod:`~pyro_pidkl.datasets.manufactured`):
the principal parts, the lower-order linear and nonlinear terms, and their random draw from
a seeded generator, with a smooth closed-form solution."""

import math

import torch

__all__ = ["CLASSES", "LINEAR_TERMS", "NONLINEAR_TERMS"]

D = torch.float64

#: principal parts: (inputs, time-like input or None, split input)
CLASSES = {
    "ode1": (("t",), "t"),
    "ode2": (("t",), "t"),
    "elliptic2": (("x", "y"), "x"),
    "elliptic3": (("x", "y", "z"), "x"),
    "parabolic2": (("x", "t"), "t"),
    "parabolic3": (("x", "y", "t"), "t"),
    "advection_diffusion": (("x", "t"), "t"),
    "wave": (("x", "t"), "t"),
}

#: lower-order nonlinear terms: name -> (function of (f, derivative), text)
NONLINEAR_TERMS = {
    "cube": (lambda f, df: f ** 3, "f^3"),
    "square": (lambda f, df: f ** 2, "f^2"),
    "sin": (lambda f, df: torch.sin(f), "sin(f)"),
    "tanh": (lambda f, df: torch.tanh(f), "tanh(f)"),
    "exp": (lambda f, df: torch.exp(0.5 * f), "exp(f/2)"),
    "rational": (lambda f, df: f / (1 + f ** 2), "f/(1+f^2)"),
    "fabs": (lambda f, df: f * torch.abs(f), "f|f|"),
    "advect": (lambda f, df: f * df, "f f_{j}"),
    "gradsq": (lambda f, df: df ** 2, "(f_{j})^2"),
    "vdp": (lambda f, df: (1 - f ** 2) * df, "(1-f^2) f_{j}"),
}

LINEAR_TERMS = ("value", "gradient", "variable", "xgradient", "mixed")


# -- random construction ---------------------------------------------------------------

def _uniform(g, a, b):
    return a + (b - a) * float(torch.rand((), generator=g, dtype=D))


def _choice(g, items):
    return items[int(torch.randint(len(items), (), generator=g))]


def _solution(g, names, domain, time):
    r"""A smooth closed-form solution: a sum of two or three separable products of
    sines/cosines (space), damped oscillations or decays (time), Gaussian bumps and
    rational factors, with amplitudes of order one."""
    pieces, texts = [], []
    for k in range(int(torch.randint(2, 4, (), generator=g))):
        amp = _uniform(g, 0.5, 1.5) * _choice(g, (-1.0, 1.0))
        factors, ftext = [], []
        for j, n in enumerate(names):
            lo, hi = domain[n]
            L = hi - lo
            kind = _choice(g, ("trig", "trig", "bump", "rational")) if n != time else \
                _choice(g, ("decay", "oscillation", "trig"))
            if kind == "trig":
                w = _uniform(g, 0.5, 2.0) * math.pi / L
                p = _uniform(g, 0, 2 * math.pi)
                factors.append(lambda x, w=w, p=p, j=j: torch.sin(w * x[:, j] + p))
                ftext.append(f"sin({w:.3g} {n} + {p:.3g})")
            elif kind == "bump":
                c = _uniform(g, lo, hi)
                s = _uniform(g, 0.3, 0.7) * L
                factors.append(lambda x, c=c, s=s, j=j: torch.exp(-(x[:, j] - c) ** 2 / (2 * s * s)))
                ftext.append(f"exp(-({n} - {c:.3g})^2 / {2 * s * s:.3g})")
            elif kind == "rational":
                c = _uniform(g, lo, hi)
                s = _uniform(g, 0.5, 1.0) * L
                factors.append(lambda x, c=c, s=s, j=j: 1 / (1 + ((x[:, j] - c) / s) ** 2))
                ftext.append(f"1/(1 + (({n} - {c:.3g})/{s:.3g})^2)")
            elif kind == "decay":
                r = _uniform(g, 0.2, 1.0) / L
                factors.append(lambda x, r=r, j=j: torch.exp(-r * x[:, j]))
                ftext.append(f"exp(-{r:.3g} {n})")
            else:
                w = _uniform(g, 0.5, 1.5) * 2 * math.pi / L
                r = _uniform(g, 0.0, 0.5) / L
                p = _uniform(g, 0, 2 * math.pi)
                factors.append(lambda x, w=w, r=r, p=p, j=j:
                               torch.exp(-r * x[:, j]) * torch.cos(w * x[:, j] + p))
                ftext.append(f"exp(-{r:.3g} {n}) cos({w:.3g} {n} + {p:.3g})")

        def piece(x, amp=amp, factors=tuple(factors)):
            out = amp * torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
            for fac in factors:
                out = out * fac(x)
            return out
        pieces.append(piece)
        texts.append(f"{amp:.3g} " + " ".join(ftext))
    return (lambda x: sum(p(x) for p in pieces)), " + ".join(texts)


def _principal(kind, names, g, truth, terms):
    """Append the principal part's terms; returns the coefficient names it learns."""
    space = [n for n in names if n != "t"]
    if kind == "ode1":
        terms.append((None, "f_t", lambda f, x, c: f.d("t"), True))
        return []
    if kind == "ode2":
        truth["a"] = round(_uniform(g, 0.2, 1.0), 3)
        terms.append((None, "f_tt", lambda f, x, c: f.d("t", "t"), True))
        terms.append(("a", "a f_t", lambda f, x, c: c["a"] * f.d("t"), True))
        return ["a"]
    if kind.startswith("elliptic"):
        truth["k"] = round(_uniform(g, 0.5, 2.0), 3)
        terms.append(("k", "-k lap(f)", lambda f, x, c: -c["k"] * f.laplacian(*space), True))
        return ["k"]
    if kind.startswith("parabolic"):
        truth["k"] = round(_uniform(g, 0.05, 0.5), 3)
        terms.append((None, "f_t", lambda f, x, c: f.d("t"), True))
        terms.append(("k", "-k lap_x(f)", lambda f, x, c: -c["k"] * f.laplacian(*space), True))
        return ["k"]
    if kind == "advection_diffusion":
        truth["v"] = round(_uniform(g, 0.3, 1.5), 3)
        truth["k"] = round(_uniform(g, 0.05, 0.3), 3)
        terms.append((None, "f_t", lambda f, x, c: f.d("t"), True))
        terms.append(("v", "v f_x", lambda f, x, c: c["v"] * f.d("x"), True))
        terms.append(("k", "-k f_xx", lambda f, x, c: -c["k"] * f.d("x", "x"), True))
        return ["v", "k"]
    if kind == "wave":
        truth["c2"] = round(_uniform(g, 0.3, 1.5), 3)
        terms.append((None, "f_tt", lambda f, x, c: f.d("t", "t"), True))
        terms.append(("c2", "-c2 f_xx", lambda f, x, c: -c["c2"] * f.d("x", "x"), True))
        return ["c2"]
    raise ValueError(f"Unknown kind {kind!r}")


def _lower_order(g, names, truth, terms, k, nonlinear, first_order_time, taken=()):
    """One lower-order term with coefficient ``b<k>``. Where the principal part is first
    order in time, no lower-order term differentiates in time: a term such as
    :math:`(f_t)^2` or :math:`f f_t` there makes the equation implicit in :math:`f_t` (two
    branches, or none where its coefficient vanishes), not a well-posed problem. A
    constant-coefficient first derivative that the principal part has already (``taken``:
    the damping of a second-order ODE, the advection) is replaced by a value term, so that
    every coefficient is identifiable."""
    name = f"b{k}"
    truth[name] = round(_uniform(g, 0.3, 1.5), 3)
    candidates = tuple(n for n in names if not (first_order_time and n == "t"))
    j = _choice(g, candidates) if candidates else None
    if j is None and not nonlinear:
        terms.append((name, f"{name} f", lambda f, x, c, name=name: c[name] * f, True))
        return
    if j is None:                          # a first-order ODE: terms in f alone
        key = _choice(g, ("cube", "square", "sin", "tanh", "exp", "rational", "fabs"))
        fn, text = NONLINEAR_TERMS[key]
        terms.append((name, f"{name} {text}",
                      lambda f, x, c, fn=fn, name=name: c[name] * fn(f, None), False))
        return
    if nonlinear:
        key = _choice(g, tuple(NONLINEAR_TERMS))
        fn, text = NONLINEAR_TERMS[key]
        text = text.replace("{j}", j)
        terms.append((name, f"{name} {text}",
                      lambda f, x, c, fn=fn, j=j, name=name: c[name] * fn(f, f.d(j)), False))
        return
    key = _choice(g, LINEAR_TERMS if len(candidates) > 1 else LINEAR_TERMS[:4])
    if key == "gradient" and j in taken:
        key = "value"                      # the principal part's own term: not identifiable
    if key == "value":
        terms.append((name, f"{name} f", lambda f, x, c, name=name: c[name] * f, True))
    elif key == "gradient":
        terms.append((name, f"{name} f_{j}",
                      lambda f, x, c, name=name, j=j: c[name] * f.d(j), True))
    elif key == "variable":
        terms.append((name, f"{name} (1 + sin({j})/2) f",
                      lambda f, x, c, name=name, j=j: c[name] * (1 + 0.5 * torch.sin(x[j])) * f,
                      True))
    elif key == "xgradient":
        terms.append((name, f"{name} cos({j}) f_{j}",
                      lambda f, x, c, name=name, j=j: c[name] * torch.cos(x[j]) * f.d(j), True))
    else:
        a, b = candidates[0], candidates[1]
        truth[name] = round(_uniform(g, 0.05, 0.3), 3)     # small: keeps the type
        terms.append((name, f"{name} f_{a}{b}",
                      lambda f, x, c, name=name, a=a, b=b: c[name] * f.d(a, b), True))
