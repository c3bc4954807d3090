# nlme's population fit of the theophylline data (Pinheiro & Bates 2000, section 8.2), for
# benchmarks/population.py: reads the CSV path from the command line, prints JSON.
args <- commandArgs(trailingOnly = TRUE)
suppressMessages(library(nlme))
d <- read.csv(args[1])
d <- groupedData(conc ~ Time | Subject, data = d)
t0 <- proc.time()
fm <- nlme(conc ~ SSfol(Dose, Time, lKe, lKa, lCl), data = d, fixed = lKe + lKa + lCl ~ 1,
           random = pdDiag(lKa + lCl ~ 1), start = c(-2.5, 0.5, -3))
el <- proc.time() - t0
fe <- fixef(fm)
vc <- as.numeric(VarCorr(fm)[, "StdDev"])
cat(sprintf('{"lKe": %.7f, "lKa": %.7f, "lCl": %.7f, "sd_lKa": %.7f, "sd_lCl": %.7f, "sigma": %.7f, "loglik": %.5f, "cpu_seconds": %.3f, "version": "R %s, nlme %s"}\n',
            fe[["lKe"]], fe[["lKa"]], fe[["lCl"]], vc[1], vc[2], fm$sigma,
            as.numeric(logLik(fm)), el[["user.self"]] + el[["sys.self"]],
            paste(R.version$major, R.version$minor, sep = "."), packageVersion("nlme")))
