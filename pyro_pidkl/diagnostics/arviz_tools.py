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


#: models whose ``forward`` gives marginal variances only: their draws of :math:`f` at the
#: training inputs are drawn point by point (the pointwise log likelihood needs no more)
MARGINAL_ONLY = ("SparseGP", "SparsePIDKL")


def _draws(mean, var, num_samples, gen):
    """``num_samples`` draws ``mean + z sqrt(var)`` (independent marginals)."""
    z = torch.randn((num_samples, *mean.shape), generator=gen, dtype=mean.dtype)
    return mean + z * var.clamp(min=0).sqrt()


def predictive_groups(model, X_test, num_samples, gen):
    r"""``num_samples`` draws from a fitted model's predictive at its current parameters:
    ``(groups, dims)`` with ``groups`` ``{"posterior": {"f_train"}, "posterior_predictive":
    {"f", "y"}, "log_likelihood": {"y_train"}}`` as numpy arrays ``(num_samples, ...)`` (no
    chain dim) and ``dims`` their dim names. For a system
    (:class:`~pyro_pidkl.models.ConditionedSystemGP`): ``f``, ``y`` ``(..., test, output)``
    and one log likelihood ``y_<output>`` per observed output."""
    if hasattr(model, "outputs"):
        return _system_groups(model, X_test, num_samples, gen)
    mean, var_f = model(X_test)
    f_test = _draws(mean, var_f, num_samples, gen)
    noise = model.noise_variance()
    y_test_draws = f_test + math.sqrt(noise) * torch.randn(f_test.shape, generator=gen,
                                                           dtype=mean.dtype)
    if type(model).__name__ in MARGINAL_ONLY:
        f_train = _draws(*model(model.X), num_samples, gen)
    else:
        mean_tr, cov_tr = model(model.X, full_cov=True)
        # the posterior covariance at closely spaced, nearly noise-free training points is
        # numerically singular: factor it by eigh with the (round-off) negative part clipped
        evals, evecs = torch.linalg.eigh(0.5 * (cov_tr + cov_tr.T))
        root = evecs * evals.clamp(min=0).sqrt()
        f_train = mean_tr + torch.randn((num_samples, mean_tr.shape[0]), generator=gen,
                                        dtype=mean.dtype) @ root.T
    loglik = (-0.5 * (model.y - f_train) ** 2 / noise - 0.5 * math.log(2 * math.pi * noise))
    groups = {"posterior": {"f_train": _numpy(f_train)},
              "posterior_predictive": {"f": _numpy(f_test), "y": _numpy(y_test_draws)},
              "log_likelihood": {"y_train": _numpy(loglik)}}
    dims = {"f_train": ["train"], "y_train": ["train"], "f": ["test"], "y": ["test"]}
    return groups, dims


def _system_groups(model, X_test, num_samples, gen):
    """:func:`predictive_groups` of a system: marginal draws of every output at ``X_test``
    and of each observed output at its own training inputs."""
    mean, var_f = model(X_test)                                            # (P, C)
    _, var_y = model(X_test, noiseless=False)
    f_test = _draws(mean, var_f, num_samples, gen)
    y_test = f_test + _draws(torch.zeros_like(mean), var_y - var_f, num_samples, gen)
    groups = {"posterior_predictive": {"f": _numpy(f_test), "y": _numpy(y_test)},
              "log_likelihood": {}}
    dims = {"f": ["test", "output"], "y": ["test", "output"]}
    noises = model.noises().detach() * model.y_scale ** 2
    for c, name in enumerate(model.outputs):
        if not model.counts[c]:
            continue
        m, v = model(model.X_by_output[c])
        f = _draws(m[:, c], v[:, c], num_samples, gen)
        y, noise = model.y_by_output[c], float(noises[c])
        groups["log_likelihood"][f"y_{name}"] = _numpy(
            -0.5 * (y - f) ** 2 / noise - 0.5 * math.log(2 * math.pi * noise))
        dims[f"y_{name}"] = [f"train_{name}"]
    return groups, dims


def observed_group(model, y_test, groups):
    """The ``observed_data`` group: the training targets (``y_<output>`` each for a system),
    and ``y`` at the test inputs when ``y_test`` is given (checked against the predictive's
    shape)."""
    if hasattr(model, "outputs"):
        data = {f"y_{name}": _numpy(y) for name, y, n in
                zip(model.outputs, model.y_by_output, model.counts) if n}
    else:
        data = {"y_train": _numpy(model.y)}
    if y_test is not None:
        shape = groups["posterior_predictive"]["f"].shape[1:]
        y_obs = np.asarray(y_test, dtype=float).reshape(-1)
        if y_obs.size != int(np.prod(shape)):
            raise ValueError(f"Expected y_test to have shape {shape} to match X_test; got "
                             f"{np.asarray(y_test).shape}")
        data["y"] = y_obs.reshape(shape)
    return data


def with_input_coords(tree, model, X_test):
    """``tree`` with one coordinate per input name on its ``test`` dim (``test_t``) and
    training dims (``train_t``; ``train_<output>_t`` for a system), and the outputs' names
    on a system's ``output`` dim."""
    names = list(model.input_names)
    Xt = _numpy(torch.as_tensor(np.asarray(X_test, dtype=float)).reshape(-1, len(names)))
    train = ({f"train_{o}": _numpy(X) for o, X in zip(model.outputs, model.X_by_output)}
             if hasattr(model, "outputs") else {"train": _numpy(model.X)})
    for group in list(tree.children):
        ds = tree[group].to_dataset()
        coords = {}
        if "test" in ds.dims:
            coords.update({f"test_{name}": ("test", Xt[:, j]) for j, name in enumerate(names)})
        if "output" in ds.dims:
            coords["output"] = list(model.outputs)
        for dim, X in train.items():
            if dim in ds.dims:
                coords.update({f"{dim}_{name}": (dim, X[:, j]) for j, name in enumerate(names)})
        if coords:
            tree[group] = ds.assign_coords(coords)
    return tree


def _equation_draws(model, num_samples, seed):
    """``{name: (num_samples, ...)}`` of a model's equation parameters: draws from PI-DKL's
    guide for those with a prior, the point estimate repeated for the others."""
    physics = getattr(model, "physics", None)
    draws = {}
    if physics is not None and getattr(physics, "bayesian_sites", None):
        import pyro
        from pyro import poutine
        with torch.no_grad(), pyro.poutine.seed(rng_seed=seed):
            traces = [poutine.trace(physics.equation_guide).get_trace()
                      for _ in range(num_samples)]
        for site in physics.bayesian_sites:
            draws[site.rsplit(".", 1)[1]] = np.stack(
                [_numpy(tr.nodes[site]["value"]) for tr in traces])
    params = model.equation_parameters() if hasattr(model, "equation_parameters") else {}
    for name, value in params.items():
        if name not in draws:
            value = np.asarray(value, dtype=float)
            draws[name] = np.broadcast_to(value, (num_samples, *value.shape)).copy()
    return draws


def to_datatree(model, X_test, y_test=None, num_samples=200, seed=0):
    """An ArviZ ``DataTree`` of any fitted model (PIDKL, DKL, SKL, LFM, SparseGP,
    SparsePIDKL, PhysicsConditionedGP, ConditionedSystemGP) at its fitted parameters; for a
    conditioned GP's parameter draws,
    :meth:`~pyro_pidkl.infer.coefficient_samples.CoefficientSamples.to_datatree`.

    Groups (``S = num_samples``, one chain): ``posterior`` — ``f_train`` ``(chain, draw,
    train)``, posterior draws of :math:`f` at the training inputs (joint; marginal for the
    sparse models), and the equation parameters (draws of PI-DKL's guide for those with a
    prior, else the estimate, constant over draws); ``posterior_predictive`` — ``f`` and
    ``y`` ``(chain, draw, test)``; ``log_likelihood`` — ``y_train`` ``(chain, draw, train)``,
    :math:`\\log \\mathcal{N}(y_i \\mid f_i, \\sigma^2)`; ``observed_data`` — ``y_train``
    and, when ``y_test`` is given, ``y`` at the test inputs. The ``test`` dim carries one
    coordinate per input name (e.g. ``test_t``), the ``train`` dim ``train_t``, ....
    A system's are per output (:func:`predictive_groups`), with an ``output`` dim.

    A conditioned GP adds the check of its equation: ``equation_data`` holds, for each
    equation (and condition) ``k``, the posterior mean's residual ``residual_k``, the size
    of the equation's terms ``terms_k`` and the points' inputs ``points_k_<input>`` at its
    collocation points (dim ``collocation_k``), and the tree's ``attrs["adequacy"]`` the
    numbers of :meth:`~pyro_pidkl.models.conditioning.linearised.LinearisedConditioning.adequacy` (a
    JSON string; ``attrs["equations"]`` names the blocks in order).
    """
    from arviz_base import from_dict

    gen = torch.Generator().manual_seed(seed)
    groups, dims = predictive_groups(model, X_test, num_samples, gen)
    data = {group: {k: v[None] for k, v in values.items()} for group, values in groups.items()}
    data["observed_data"] = observed_group(model, y_test, groups)
    data.setdefault("posterior", {})
    for name, values in _equation_draws(model, num_samples, seed).items():
        data["posterior"][name] = values[None]
        if values.ndim > 1:
            dims[name] = [f"{name}_dim"]
    attrs = {}
    if hasattr(model, "equation_residuals"):
        import json
        blocks = model.equation_residuals()
        data["equation_data"] = {}
        for k, (points, residual, size) in enumerate(blocks.values()):
            group = {f"residual_{k}": residual, f"terms_{k}": size}
            group.update({f"points_{k}_{n}": points[:, j]
                          for j, n in enumerate(model.input_names)})
            for name, values in group.items():
                data["equation_data"][name] = _numpy(values)
                dims[name] = [f"collocation_{k}"]
        attrs = {"adequacy": json.dumps(model.adequacy().as_dict()),
                 "equations": json.dumps(list(blocks))}
    tree = with_input_coords(from_dict(data, dims=dims), model, X_test)
    tree.attrs.update(attrs)
    return tree


def loo(tree, var_name=None):
    """PSIS-LOO of the training data from a :func:`to_datatree` tree (``arviz_stats.loo``):
    ``y_train``'s, or ``var_name``'s (a system's ``y_<output>``)."""
    from arviz_stats import loo as az_loo

    if var_name is None:
        names = list(tree["log_likelihood"].data_vars)
        var_name = "y_train" if "y_train" in names else names[0]
    return az_loo(tree, pointwise=True, var_name=var_name)


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
