"""A regression task: training and test data, input names, and what generated it."""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Dataset"]


@dataclass
class Dataset:
    """Training/test split of a regression task (arrays in the user's units).

    :ivar X_train: ``(N, d)`` inputs. :ivar y_train: ``(N,)`` targets.
    :ivar X_test: ``(M, d)`` inputs. :ivar y_test: ``(M,)`` targets.
    :ivar input_names: the ``d`` input names.
    :ivar truth: known equation parameters (empty for real data).
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    input_names: tuple
    truth: dict = field(default_factory=dict)
    description: str = ""

    def __post_init__(self):
        for a in ("X_train", "X_test"):
            v = np.asarray(getattr(self, a), dtype=np.float64)
            setattr(self, a, v.reshape(-1, 1) if v.ndim == 1 else v)
        for a in ("y_train", "y_test"):
            setattr(self, a, np.asarray(getattr(self, a), dtype=np.float64).reshape(-1))
        self.input_names = tuple(self.input_names)
        d = len(self.input_names)
        for a, b in (("X_train", "y_train"), ("X_test", "y_test")):
            X, y = getattr(self, a), getattr(self, b)
            if X.shape[1] != d or X.shape[0] != y.shape[0]:
                raise ValueError(f"Expected {a} (N, {d}) and {b} (N,); got {X.shape} and "
                                 f"{y.shape}")

    def __repr__(self):
        return (f"Dataset({self.name!r}, inputs={self.input_names}, "
                f"train={self.X_train.shape[0]}, test={self.X_test.shape[0]})")
