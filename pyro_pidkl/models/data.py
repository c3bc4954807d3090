r"""Observations of a system's outputs, in long or wide form, checked and split by output.

Long form: ``{"P": (t_P, y_P), "M": (t_M, y_M)}``, each output observed at its own inputs;
an output that is not a key is never observed. Wide form: ``(X, Y)`` with ``Y`` ``(N, C)``
in the order of the system's outputs and ``NaN`` where an output was not measured.
"""

import torch

from ..checks import _to_tensor, as_inputs, as_targets, without_repeats

__all__ = ["split_by_output"]


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
