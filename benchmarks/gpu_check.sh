#!/usr/bin/env bash
# The checks to run once on a machine with a CUDA GPU (written for the lent H100/H200, whose
# python3 has torch but not Pyro: the wheels in .whl/ are installed first when present).
#
#   OUT=runs/gpu bash benchmarks/gpu_check.sh
#
# 1. the CUDA tests (skipped on CPU-only machines): exact, sparse and Bayesian-alpha fits on the
#    device; closed-form derivatives against autograd there; the benchmark case there;
# 2. the speed anchor on the device: PI-DKL and DKL steps beside GPyTorch's exact DKL at
#    N = 100 and 1000, and 1000-step fits at N = 100 (docs/speed.md's targets);
# 3. the sparse epoch at N = 1e6 with B = 10000 on the device (target: 10 s on one H100);
# 4. `benchmarks/step_time.py --device cuda`: PI-DKL and DKL steps in one process, N up to 20000;
# 5. the exact PI-DKL fits at N = 1e4 and 2e4 of benchmarks/scale.py on the device;
# 6. benchmarks/sparse_step.py on the device (the sparse step, physics derivatives both ways).
# In order of priority: a run cut short keeps what came first. About 11 minutes on one H100
# (the machine's start not counted).
set -uo pipefail
OUT=${OUT:-runs/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, pyro; print('torch', torch.__version__, 'pyro', pyro.__version__, torch.cuda.get_device_name())" | tee -a "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_variational.py tests/test_draw.py \
    tests/test_benchmarks.py -k "on_device or identical_either_way or benchmark_case" -ra 2>&1 \
    | tee "$OUT/tests.log"
python3 benchmarks/step_time.py --device cuda --N 100,1000 --m 10,100 --repeats 20 \
    --anchor gpytorch --no-autograd --fit-steps 1000 | tee "$OUT/speed_anchor_cuda.jsonl"
python3 benchmarks/scale.py --N 1000000 --methods sparse --B 10000 --min-steps 1000 \
    --device cuda --out "$OUT/scale_sparse_cuda.jsonl"
python3 benchmarks/step_time.py --device cuda --repeats 15 | tee "$OUT/bench_cuda.jsonl"
python3 benchmarks/step_time.py --device cuda --N 5000,10000,20000 --m 100 --repeats 5 \
    --no-autograd | tee -a "$OUT/bench_cuda.jsonl"
python3 benchmarks/scale.py --N 10000,20000 --methods exact --exact-max 20000 --min-steps 300 \
    --device cuda --out "$OUT/scale_cuda.jsonl"
python3 benchmarks/sparse_step.py --device cuda --repeats 20 | tee "$OUT/sparse_step_cuda.jsonl"
