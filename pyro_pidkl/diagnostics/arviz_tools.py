r"""Predictive diagnostics on the modern ArviZ API (``arviz_base``, ``arviz_stats``).

A fitted model's predictive at test inputs is Gaussian,
:math:`y_* \sim \mathcal{N}(\mu_*, v_* + \sigma^2)`, so held-out scores are exact:

* mean test log predictive density :math:`\tfrac1n \sum_i \log \mathcal{N}(y_i \mid \mu_i, s_i^2)`;
* PIT values :math:`u_i = \Phi((y_i - \mu_i)/s_i)`, uniform under a calibrated model
  (Kolmogorov-Smirnov test of uniformity);
* central-interval coverage at several levels; RMSE and nRMSE.

:func:`to_datatree` draws from the same predictive (independent marginals at the test
inputs, the joint posterior of :math:`f` at the training inputs) into an ArviZ ``DataTree``
whose dims and coordinates are named after the inputs, with the pointwise log likelihood of
the training data for PSIS-LOO (:func:`loo`), and :func:`exact_loo` gives the closed-form GP
leave-one-out predictive (Rasmussen & Williams, eq. 5.12) to check it against.
"""

import math

import numpy as np
import torch

from ..param_scope import own_parameters

__all__ = ["compare", "exact_loo", "loo", "observed_group", "predictive_groups", "to_datatree",
           "with_input_coords"]

def _numpy(t):
    return t.detach().cpu().numpy()


def predictive_groups(model, X_test, num_samples, gen):
    r"""``num_samples`` draws from a fitted single-output model's predictive at its current
    parameters: ``(groups, dims)`` with ``groups`` ``{"posterior": {"f_train"},
    "posterior_predictive": {"f", "y"}, "log_likelihood": {"y_train"}}`` as numpy arrays
    ``(num_samples, ...)`` (no chain dim) and ``dims`` their dim names."""
    mean, var_f = model(X_test)
    dtype = mean.dtype
    sd_f = var_f.clamp(min=0).sqrt()
    noise = model.noise_variance()
    z = torch.randn((num_samples, mean.shape[0]), generator=gen, dtype=dtype)
    f_test = mean + z * sd_f
    y_test_draws = f_test + math.sqrt(noise) * torch.randn(f_test.shape, generator=gen,
                                                           dtype=dtype)
    mean_tr, cov_tr = model(model.X, full_cov=True)
    n = mean_tr.shape[0]
    # the posterior covariance at closely spaced, nearly noise-free training points is
    # numerically singular: factor it by eigh with the (round-off) negative part clipped
    evals, evecs = torch.linalg.eigh(0.5 * (cov_tr + cov_tr.T))
    root = evecs * evals.clamp(min=0).sqrt()
    f_train = mean_tr + torch.randn((num_samples, n), generator=gen, dtype=dtype) @ root.T
    loglik = (-0.5 * (model.y - f_train) ** 2 / noise - 0.5 * math.log(2 * math.pi * noise))
    groups = {"posterior": {"f_train": _numpy(f_train)},
              "posterior_predictive": {"f": _numpy(f_test), "y": _numpy(y_test_draws)},
              "log_likelihood": {"y_train": _numpy(loglik)}}
    dims = {"f_train": ["train"], "y_train": ["train"], "f": ["test"], "y": ["test"]}
    return groups, dims


def observed_group(model, y_test, groups):
    """The ``observed_data`` group: the training targets, and ``y`` at the test inputs
    when ``y_test`` is given (checked against the predictive's length)."""
    data = {"y_train": _numpy(model.y)}
    if y_test is not None:
        size = groups["posterior_predictive"]["f"].shape[-1]
        y_obs = np.asarray(y_test, dtype=float).reshape(-1)
        if y_obs.shape[0] != size:
            raise ValueError(f"Expected y_test to have shape ({size},) to match X_test; got "
                             f"{np.asarray(y_test).shape}")
        data["y"] = y_obs
    return data


def with_input_coords(tree, model, X_test):
    """``tree`` with one coordinate per input name on its ``test`` dim (``test_t``) and
    ``train`` dim (``train_t``)."""
    Xt = _numpy(torch.as_tensor(np.asarray(X_test, dtype=float)).reshape(
        -1, len(model.input_names)))
    Xtr = _numpy(model.X)
    for group in list(tree.children):
        ds = tree[group].to_dataset()
        coords = {}
        if "test" in ds.dims:
            coords.update({f"test_{name}": ("test", Xt[:, j])
                           for j, name in enumerate(model.input_names)})
        if "train" in ds.dims:
            coords.update({f"train_{name}": ("train", Xtr[:, j])
                           for j, name in enumerate(model.input_names)})
        if coords:
            tree[group] = ds.assign_coords(coords)
    return tree


def to_datatree(model, X_test, y_test=None, num_samples=200, seed=0):
    """An ArviZ ``DataTree`` of a fitted single-output model (PIDKL, DKL, SKL, LFM,
    SparseGP, PhysicsConditionedGP) at its fitted parameters; for a conditioned GP's
    parameter draws, :meth:`~pyro_pidkl.infer.nuts.CoefficientSamples.to_datatree`.

    Groups (``S = num_samples``, one chain): ``posterior`` — ``f_train`` ``(chain, draw,
    train)``, joint posterior draws of :math:`f` at the training inputs, and the equation
    parameters (point estimates, constant over draws); ``posterior_predictive`` —
    ``f`` and ``y`` ``(chain, draw, test)``; ``log_likelihood`` — ``y_train`` ``(chain, draw,
    train)``, :math:`\\log \\mathcal{N}(y_i \\mid f_i, \\sigma^2)`; ``observed_data`` —
    ``y_train`` and, when ``y_test`` is given, ``y`` at the test inputs. The ``test`` dim
    carries one coordinate per input name (e.g. ``test_t``), the ``train`` dim ``train_t``, ....
    """
    from arviz_base import from_dict

    gen = torch.Generator().manual_seed(seed)
    groups, dims = predictive_groups(model, X_test, num_samples, gen)
    data = {group: {k: v[None] for k, v in values.items()} for group, values in groups.items()}
    data["observed_data"] = observed_group(model, y_test, groups)
    if hasattr(model, "equation_parameters"):
        for name, value in model.equation_parameters().items():
            value = np.asarray(value, dtype=float)
            data["posterior"][name] = np.broadcast_to(value, (1, num_samples, *value.shape))
            if value.ndim:
                dims[name] = [f"{name}_dim"]
    return with_input_coords(from_dict(data, dims=dims), model, X_test)


def loo(tree):
    """PSIS-LOO of the training data from a :func:`to_datatree` tree (``arviz_stats.loo``)."""
    from arviz_stats import loo as az_loo

    return az_loo(tree, pointwise=True, var_name="y_train")


@own_parameters
def exact_loo(model):
    r"""Closed-form leave-one-out predictive of an exact GP (user units).

    .. math:: \mu_{-i} = y_i - [K^{-1} (y - c)]_i / [K^{-1}]_{ii}, \qquad
              \sigma^2_{-i} = 1 / [K^{-1}]_{ii}

    with :math:`K = k(X, X) + \sigma^2 I` on the standardised data and :math:`c` the prior
    mean (0 unless ``mean="constant"``).

    :returns: ``(mean (N,), var (N,), elpd)`` where ``elpd`` is the summed LOO log density.
    """
    with torch.no_grad():
        post = model.posterior()
        Kinv = torch.cholesky_inverse(post.L)
        alpha = Kinv @ post.y
        d = Kinv.diagonal()
        st = model.standardizer
        mean = st.f_to_user(post.offset + post.y - alpha / d)
        var = st.var_to_user(1.0 / d)
        y = model.y
        elpd = float((-0.5 * (y - mean) ** 2 / var - 0.5 * torch.log(2 * math.pi * var)).sum())
    return mean, var, elpd


def compare(models):
    """Rank models by PSIS-LOO on their training data (``arviz_stats.compare``).

    :param dict models: ``{name: DataTree from to_datatree, or ELPDData from loo}``. The
        trees are reduced to ``ELPDData`` first, which ``compare`` takes in arviz-stats 0.8
        and in ArviZ 1.x alike.
    :returns: a ``pandas.DataFrame`` (rank, elpd, weights, ...).
    """
    from arviz_stats import compare as az_compare

    elpd = {name: (loo(m) if hasattr(m, "children") else m) for name, m in models.items()}
    return az_compare(elpd)
