# The MAGI peer for benchmarks/systems.py: MagiSolver (the R package magi of wongswk/magi,
# Yang, Wong & Kou, PNAS 2021) on the Hes1 system on the log scale, with the settings of the
# package's own example (rmagi/examples/hes1-log.R): the data at their 33 times as the
# discretisation, 500 leapfrog steps per HMC iteration, step-size factor 0.01, the noise
# level known (0.15 on the log scale, useFixedSigma), the rates bounded below by 0.
# Run by `Rscript` with the magi package on R_LIBS (PIDKL_PEER_RSCRIPT names the
# interpreter); this library is not used here.
#
# Reads JSON on stdin:
#   {"times": [...], "P": [...], "M": [...], "sigma": 0.15, "niter": 20000, "seed": 0}
# (P, M: the logs, null where not observed; H never) and writes JSON on stdout: per rate
# the posterior mean, sd and central 95% interval; per component the posterior mean and sd
# of the trajectory at the times; the seconds (one thread) and the versions.

suppressPackageStartupMessages(library(magi))
spec <- jsonlite::fromJSON(file("stdin"))
set.seed(spec$seed)
y <- data.frame(time = spec$times,
                X1 = sapply(spec$P, function(v) if (is.null(v)) NaN else v),
                X2 = sapply(spec$M, function(v) if (is.null(v)) NaN else v),
                X3 = NaN)
hes1logmodel <- list(name = "Hes1-log", fOde = magi:::hes1logmodelODE,
                     fOdeDx = magi:::hes1logmodelDx, fOdeDtheta = magi:::hes1logmodelDtheta,
                     thetaLowerBound = rep(0, 7), thetaUpperBound = rep(Inf, 7))
began <- proc.time()
result <- invisible(capture.output(fit <- MagiSolver(
  y[, -1], hes1logmodel, y$time,
  control = list(nstepsHmc = 500, niterHmc = spec$niter, stepSizeFactor = 0.01,
                 sigma = rep(spec$sigma, 3), useFixedSigma = TRUE)), type = "output"))
took <- proc.time() - began
names <- c("a", "b", "c", "d", "e", "g", "h")
rates <- list()
for (k in seq_along(names)) {
  draws <- fit$theta[, k]
  rates[[names[k]]] <- list(mean = mean(draws), sd = sd(draws),
                            lower = unname(quantile(draws, 0.025)),
                            upper = unname(quantile(draws, 0.975)))
}
traj <- apply(fit$xsampled, 2:3, mean)
spread <- apply(fit$xsampled, 2:3, sd)
out <- list(coefficients = rates,
            trajectory = list(P = traj[, 1], M = traj[, 2], H = traj[, 3]),
            trajectory_sd = list(P = spread[, 1], M = spread[, 2], H = spread[, 3]),
            times = y$time, cpu_seconds = unname(took["user.self"] + took["sys.self"]),
            seconds = unname(took["elapsed"]),
            versions = list(magi = as.character(packageVersion("magi")),
                            R = paste(R.version$major, R.version$minor, sep = ".")),
            settings = list(niterHmc = spec$niter, nstepsHmc = 500, burninRatio = 0.5,
                            stepSizeFactor = 0.01, sigma_known = spec$sigma))
cat(jsonlite::toJSON(out, auto_unbox = TRUE, digits = NA))
