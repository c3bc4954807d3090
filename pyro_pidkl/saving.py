r"""Saving a fitted model and loading it in another process.

:func:`save` writes the whole model (its data, parameters, buffers, fitted state, the
user's own ``pyro.param`` sites and the equation it was built with) with
`cloudpickle <https://github.com/cloudpipe/cloudpickle>`_, which stores a function that
plain :mod:`pickle` can only name by reference (a lambda, a closure, an equation defined in
the user's script, ``__main__``) by value: the file loads where that script is absent.
:func:`load` reads it back; the loaded model predicts exactly as the saved one did.

A function is stored by value with the names it reads (its globals, its closure); what
cannot be stored (an open file, a lock, a generator the equation holds) is refused at
:func:`save` in one line naming it. Functions of an importable module (``torch.sin``,
``numpy``, your package's) are stored by reference, as :mod:`pickle` does: the same
versions must be importable where the file is loaded. The file is a pickle: load only files
you trust.
"""

import io
import os
import pickle

import torch

__all__ = ["load", "save"]

#: the first key of a saved file, checked when it is loaded
FORMAT = "pyro_pidkl.model/1"

#: modules that held the library's classes before the models moved into folders by model
#: (the part of ``pyro_pidkl.models.`` after it): their classes are looked up where they
#: are now, so that a file saved before the move loads
MOVED = {"conditioned": "single.model", "conditioned_joint": "single.joint",
         "conditioned_prediction": "single.prediction", "linearised": "conditioning.linearised",
         "parameter_uncertainty": "conditioning.parameter_uncertainty",
         "referee": "conditioning.referee", "referee_problems": "conditioning.referee_problems",
         "resolution": "conditioning.resolution", "sparse_solver": "conditioning.sparse_solver",
         "sparse_lengthscale": "conditioning.sparse_lengthscale",
         "system_stages": "conditioning.stages", "system_starts": "conditioning.starts",
         "base": "pidkl.base", "baselines": "pidkl.baselines", "exact_gp": "pidkl.exact_gp",
         "lfm": "pidkl.lfm", "sparse": "pidkl.sparse", "variational": "pidkl.sparse",
         "system_pidkl": "pidkl.system", "system_conditions": "system.conditions",
         "system_counts": "conditioning.counts", "system.counts": "conditioning.counts",
         "system_joint": "system.joint",
         "system_matching": "system.matching", "system": "system.model"}


class _Unpickler(pickle.Unpickler):
    """:mod:`pickle`'s unpickler, with each moved module (:data:`MOVED`) read as its new
    one."""

    def find_class(self, module, name):
        prefix = "pyro_pidkl.models."
        if module.startswith(prefix) and module[len(prefix):] in MOVED:
            try:
                return super().find_class(module, name)
            except (ModuleNotFoundError, AttributeError):
                module = prefix + MOVED[module[len(prefix):]]
        return super().find_class(module, name)


def save(model, path):
    """Write ``model`` (any model of the library, fitted or not) to ``path``.

    :raises TypeError: where ``model`` is neither a :class:`torch.nn.Module` nor one of the
        library's solvers, or a part of it
        cannot be stored (one line: what, and the fix)."""
    import cloudpickle

    from . import __version__
    if not (isinstance(model, torch.nn.Module)
            or type(model).__module__.startswith("pyro_pidkl.")):
        raise TypeError(f"Expected a pyro_pidkl model (a torch.nn.Module or a solver) to save; got "
                        f"{type(model).__name__}")
    payload = {"format": FORMAT, "version": __version__, "class": type(model).__name__,
               "torch": torch.__version__, "model": model}
    buffer = io.BytesIO()
    try:
        cloudpickle.dump(payload, buffer, protocol=pickle.DEFAULT_PROTOCOL)
    except (TypeError, pickle.PicklingError, AttributeError) as e:
        raise TypeError(f"Cannot save {type(model).__name__}: a part of it cannot be stored "
                        f"({str(e).splitlines()[0][:160]}); an equation may read only "
                        f"tensors, numbers and functions (not open files, locks or "
                        f"generators)") from None
    tmp = f"{os.fspath(path)}.part"
    with open(tmp, "wb") as fh:               # whole or nothing: a crash leaves no half file
        fh.write(buffer.getvalue())
    os.replace(tmp, path)


def load(path):
    """Read a model written by :func:`save`: it predicts exactly as the saved one did.

    :raises ValueError: where ``path`` is not a file written by :func:`save`."""
    import cloudpickle  # noqa: F401  (the file's functions are rebuilt by it)

    with open(path, "rb") as fh:
        try:
            payload = _Unpickler(fh).load()
        except (pickle.UnpicklingError, EOFError, AttributeError, ModuleNotFoundError) as e:
            raise ValueError(f"Expected a model file written by pyro_pidkl.save; {path!r} "
                             f"could not be read ({type(e).__name__}: "
                             f"{str(e).splitlines()[0][:120]})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"Expected a model file written by pyro_pidkl.save; {path!r} is not "
                         f"one")
    return payload["model"]
