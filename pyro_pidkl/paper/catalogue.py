"""The experiments' names and methods, without importing torch: what ``pidkl --help``
prints and what the command line checks before any work starts (a test keeps it equal to
:data:`pyro_pidkl.paper.experiments.EXPERIMENTS`)."""

__all__ = ["CATALOGUE"]

_LFM = ("lfm1", "lfm3", "lfm5")
_PCGP = ("pcgp", "pcgp-zero")
_VARIANTS = ("pidkl-svgp", "pidkl-bayes", "pidkl-ens", "pidkl-best")
_ODE = (("pidkl", "pidkl-cv", "dkl", "skl") + _LFM + _VARIANTS + _PCGP,
        ("pidkl", "pidkl-cv", "dkl", "skl"), None)
_DIFFUSION = (("pidkl", "pidkl-cv", "dkl", "skl") + _LFM + ("lfm3-fixed-t",) + _VARIANTS + _PCGP,
              ("pidkl", "pidkl-best", "pidkl-cv", "dkl", "skl"), None)
_JURA = (("pidkl", "dkl", "skl") + _LFM + _PCGP, ("pidkl", "dkl", "skl") + _LFM, "PIDKL_JURA")
_MOCAP = (("pidkl", "dkl", "skl") + _LFM + _PCGP, ("pidkl", "dkl", "skl") + _LFM + ("pcgp",),
          "PIDKL_MOCAP")

#: ``{experiment: (methods, default methods, environment variable of its data or None)}``
CATALOGUE = {
    "ode": _ODE,
    "diffusion": _DIFFUSION,
    "jura-cd": _JURA,
    "jura-cu": _JURA,
    "pm25": (("pidkl", "dkl", "skl") + _PCGP, ("pidkl", "dkl", "skl"), "PIDKL_PM25"),
    "mocap": _MOCAP,
    "mocap-early": _MOCAP,
    "burgers": (("pidkl", "dkl", "skl") + _PCGP, ("pidkl", "dkl", "skl"), None),
    "ode-dev": _ODE,
    "ode-dev2": _ODE,
    "diffusion-dev": _DIFFUSION,
}
