"""Kernels on :mod:`pyro.contrib.gp.kernels`: SE-ARD, the deep kernel and its feature
networks, latent-force kernels, and closed-form covariances of derivatives."""

from .deep import WithInputs, closed_form_supported, deep_kernel, dkl_kernel, feature_map
from .derivatives import DerivativeKernel, derivative_kernel_supported
from .feature_jets import feature_jet
from .features import MLP, smoothness_order
from .lfm import FirstOrderLFMKernel, HeatLFMKernel
from .matern import Matern72, matern72_measurement_covariance
from .se import se_ard, se_cross, se_gram

__all__ = ["DerivativeKernel", "FirstOrderLFMKernel", "HeatLFMKernel", "MLP", "Matern72", "WithInputs",
           "closed_form_supported", "deep_kernel", "derivative_kernel_supported",
           "dkl_kernel", "feature_jet", "feature_map", "matern72_measurement_covariance", "se_ard",
           "se_cross", "se_gram",
           "smoothness_order"]
