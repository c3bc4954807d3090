r"""Observations of many groups (subjects, units): a group label, a time and the measured
outputs on each row, and each group's covariates (constant within a group).

:class:`GroupedData` keeps the rows as given and, per group ``i``, its observations of each
output ``c`` at its own times :math:`t_{c,ij}`, and its covariates :math:`w_{ik}` (a dose, a
weight). Every group's trajectory starts at the same ``t0`` (default the earliest time).
"""

import csv
import math
import os

import numpy as np

__all__ = ["GroupedData"]


def _column(frame, name, what):
    try:
        col = frame[name]
    except (KeyError, IndexError, TypeError):
        known = list(frame.keys()) if hasattr(frame, "keys") else "?"
        raise KeyError(f"Expected a column {name!r} for {what}; the columns are {known}") \
            from None
    return np.asarray(col)


class GroupedData:
    r"""Rows of a population's data (module docstring).

    :param group: ``(N,)`` each row's group label (any hashable: numbers or strings).
    :param time: ``(N,)`` each row's time.
    :param dict observations: ``{output: (N,)}`` the measured value of each output on each
        row (``nan`` where a row does not measure it).
    :param dict covariates: ``{name: (N,)}`` group-level values (each constant within its
        group: a dose, a weight).
    :param float t0: where every trajectory starts (default: the earliest time).
    """

    def __init__(self, group, time, observations, covariates=None, t0=None):
        group = np.asarray(group)
        time = np.asarray(time, dtype=float)
        N = group.shape[0]
        if group.ndim != 1 or time.shape != (N,):
            raise ValueError(f"Expected one group label and one time per row; got {group.shape} "
                             f"labels and {time.shape} times")
        if not np.isfinite(time).all():
            raise ValueError("Expected finite times on every row; got "
                             f"{int((~np.isfinite(time)).sum())} that are not")
        if not observations:
            raise ValueError("Expected at least one measured output; got none")
        self.observations = {}
        for name, y in observations.items():
            y = np.asarray(y, dtype=float)
            if y.shape != (N,):
                raise ValueError(f"Expected {N} values of output {name!r}, one per row; got "
                                 f"shape {y.shape}")
            self.observations[str(name)] = y
        self.labels = list(dict.fromkeys(group.tolist()))
        self.group_of = np.array([self.labels.index(g) for g in group.tolist()])
        self.time = time
        self.t0 = float(time.min()) if t0 is None else float(t0)
        if (time < self.t0).any():
            raise ValueError(f"Expected every time at or after t0 = {self.t0}; the earliest is "
                             f"{float(time.min())}")
        self.covariates = {}
        for name, w in (covariates or {}).items():
            w = np.asarray(w, dtype=float)
            if w.shape != (N,):
                raise ValueError(f"Expected {N} values of covariate {name!r}; got {w.shape}")
            per = np.full(len(self.labels), np.nan)
            for i in range(len(self.labels)):
                vals = w[self.group_of == i]
                if not np.allclose(vals, vals[0], rtol=1e-12, atol=0.0, equal_nan=True):
                    raise ValueError(f"Expected covariate {name!r} constant within each group; "
                                     f"group {self.labels[i]!r} has {sorted(set(vals))[:4]}")
                per[i] = vals[0]
            self.covariates[str(name)] = per
        empty = [self.labels[i] for i in range(self.n_groups)
                 if not any(np.isfinite(y[self.group_of == i]).any()
                            for y in self.observations.values())]
        if empty:
            raise ValueError(f"Expected every group to have a measured value; groups {empty[:5]} "
                             "have none")

    @classmethod
    def from_frame(cls, frame, group, time, observe, covariates=(), t0=None):
        """From a table: ``frame`` a mapping of column names to values (a ``pandas``
        DataFrame, a dict), ``observe`` ``{output: column}``, ``covariates`` column names."""
        if isinstance(observe, str):
            raise TypeError(f"Expected observe as {{output: column}}; got the string {observe!r}")
        covariates = (covariates,) if isinstance(covariates, str) else tuple(covariates)
        return cls(_column(frame, group, "the group"), _column(frame, time, "the time"),
                   {o: _column(frame, c, f"output {o!r}") for o, c in observe.items()},
                   {c: _column(frame, c, "a covariate") for c in covariates}, t0=t0)

    @classmethod
    def from_csv(cls, path, group, time, observe, covariates=(), t0=None):
        """From a CSV file with a header (group labels may be text; every other column used
        must be numbers; an empty cell of an output is ``nan``)."""
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Expected a CSV file with a header; {path} is not a file")
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
        if not rows:
            raise ValueError(f"Expected a header and at least one row in {path}; got none")

        def numbers(name):
            out = []
            for k, r in enumerate(rows):
                text = (r.get(name) or "").strip()
                try:
                    out.append(float(text) if text else math.nan)
                except ValueError:
                    raise ValueError(f"Expected a number in column {name!r} of {path}, row "
                                     f"{k + 2}; got {text!r}") from None
            return np.array(out)

        frame = {name: numbers(name) for name in rows[0] if name != group}
        frame[group] = [r[group] for r in rows]
        return cls.from_frame(frame, group, time, observe, covariates, t0)

    @property
    def n_groups(self):
        return len(self.labels)

    @property
    def outputs(self):
        return tuple(self.observations)

    def rows(self, output):
        """The rows measuring ``output``: ``(group index (n,), time (n,), value (n,))``."""
        y = self.observations[output]
        keep = np.isfinite(y)
        return self.group_of[keep], self.time[keep], y[keep]

    def __repr__(self):
        n = {o: int(np.isfinite(y).sum()) for o, y in self.observations.items()}
        return (f"GroupedData({self.n_groups} groups, measured {n}, covariates "
                f"{tuple(self.covariates)})")
