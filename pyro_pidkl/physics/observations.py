r"""Observations of a system's outputs, in long or wide form, checked and split by output,
and each output's typical location and size (one rule for every model that takes them).

Long form: ``{"P": (t_P, y_P), "M": (t_M, y_M)}``, each output observed at its own inputs;
an output that is not a key is never observed. Wide form: ``(X, Y)`` with ``Y`` ``(N, C)``
in the order of the system's outputs and ``NaN`` where an output was not measured.
"""

import math

import torch

from ..checks import _to_tensor, as_inputs, as_targets, without_repeats

__all__ = ["output_scales", "split_by_output", "typical_size"]


def split_by_output(data, outputs, input_names, dtype=torch.float64):
    r"""``[(X_c (N_c, d), y_c (N_c,)), ...]`` in the order of ``outputs`` (``N_c = 0`` for
    an output never observed) and the input names.

    :param data: long form ``{output: (X_c, y_c)}`` or wide form ``(X, Y)`` (module
        docstring).
    :param tuple outputs: the system's output names.
    :param input_names: names of the input columns (``None``: one input named by the
        caller's default).
    :raises ValueError: names, shapes or values that do not match, in one line.
    """
    if isinstance(data, dict):
        unknown = [k for k in data if k not in outputs]
        if unknown:
            raise ValueError(f"Expected data for the system's outputs {outputs}; got unknown "
                             f"output(s) {tuple(unknown)}")
        parts, names = {}, input_names
        for name, pair in data.items():
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ValueError(f"Expected data[{name!r}] to be a pair (X, y); got "
                                 f"{type(pair).__name__}")
            X, names = as_inputs(pair[0], names, dtype, what=f"X of output {name!r}")
            parts[name] = (X, as_targets(pair[1], X.shape[0], dtype, what=f"y of {name!r}"))
        if not parts:
            raise ValueError(f"Expected observations of at least one of {outputs}; got none")
    elif isinstance(data, (tuple, list)) and len(data) == 2:
        X, names = as_inputs(data[0], input_names, dtype)
        Y = _to_tensor(data[1], dtype, "Y")
        if Y.dim() == 1 and len(outputs) == 1:
            Y = Y[:, None]
        if Y.shape != (X.shape[0], len(outputs)):
            raise ValueError(f"Expected Y to have shape ({X.shape[0]}, {len(outputs)}): one "
                             f"column per output {outputs}, NaN where not observed; got "
                             f"{tuple(Y.shape)}")
        if bool(torch.isinf(Y).any()):
            raise ValueError("Expected finite values or NaN (not observed) in Y; got inf")
        parts = {o: (X[~torch.isnan(Y[:, c])], Y[~torch.isnan(Y[:, c]), c])
                 for c, o in enumerate(outputs) if bool((~torch.isnan(Y[:, c])).any())}
        if not parts:
            raise ValueError("Expected at least one observed value in Y; got only NaN")
    else:
        raise TypeError(f"Expected data as {{output: (X, y)}} or (X, Y); got "
                        f"{type(data).__name__}")
    d = len(names)
    parts = {o: without_repeats(X, y, f"output {o!r}") for o, (X, y) in parts.items()}
    empty = (torch.zeros(0, d, dtype=dtype), torch.zeros(0, dtype=dtype))
    return [parts.get(o, empty) for o in outputs], tuple(names)


def typical_size(y):
    r"""An output's typical size from its data ``y`` ``(n,)``: their standard deviation
    (:math:`1/n`), or, for data that do not vary (a constant, one datum), their largest
    magnitude (at least 1); 1 without data."""
    y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
    if not y.numel():
        return 1.0
    top = float(y.abs().max())
    sd = float(y.std(unbiased=False)) if y.numel() > 1 else 0.0
    return sd if sd > 1e-8 * max(top, 1e-300) else max(top, 1.0)


def output_scales(ys, outputs, scales=None):
    r"""Each output's location and size ``(locs, sizes)`` (lists in the order of
    ``outputs``): the user's ``scales[output]`` (``(loc, size)``, or ``size`` alone with the
    location from the data, 0 without), else the data's mean and :func:`typical_size`, else
    ``(0, 1)`` for an output nobody measured.

    :param ys: each output's data ``(n_c,)`` (empty where never measured).
    :raises ValueError: a scale for an unknown output, or one that is not ``size > 0`` or
        ``(loc, size > 0)``, in one line."""
    scales = dict(scales or {})
    unknown = [k for k in scales if k not in outputs]
    if unknown:
        raise ValueError(f"Expected scales for outputs among {tuple(outputs)}; got "
                         f"{tuple(unknown)}")
    locs, sizes = [], []
    for o, y in zip(outputs, ys):
        y = torch.as_tensor(y, dtype=torch.float64).reshape(-1)
        loc = float(y.mean()) if y.numel() else 0.0
        size = typical_size(y)
        if o in scales:
            given = scales[o]
            try:
                pair = [float(v) for v in given] if isinstance(given, (tuple, list)) \
                    else [float(given)]
            except (TypeError, ValueError):
                pair = []
            if len(pair) not in (1, 2):
                raise ValueError(f"Expected scales[{o!r}] = size > 0 or (loc, size > 0); got "
                                 f"{given!r}")
            loc, size = (loc, pair[0]) if len(pair) == 1 else pair
        if not (math.isfinite(loc) and math.isfinite(size) and size > 0):
            raise ValueError(f"Expected scales[{o!r}] = size > 0 or (loc, size > 0); got "
                             f"{(loc, size)}")
        locs.append(loc)
        sizes.append(size)
    return locs, sizes
