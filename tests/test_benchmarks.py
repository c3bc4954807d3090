"""The step-time benchmark's case runs (on the CPU, and on a GPU where there is one)."""

import importlib.util
from pathlib import Path

import pytest
import torch

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "step_time.py"
_spec = importlib.util.spec_from_file_location("step_time", _PATH)
step_time = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_time)


def test_benchmark_case_reports_both_steps():
    row = step_time.time_case(60, 5, repeats=1)
    assert row["N"] == 60 and row["m"] == 5
    assert row["pidkl_step_s"] > 0 and row["dkl_step_s"] > 0
    assert row["peak_rss_mib"] > 0
    assert row["device"] == "cpu" and row["pidkl_autograd_step_s"] > 0
    assert row["pidkl_plain_step_s"] > 0   # the plain Pyro step beside fit's


def test_fit_times_reports_each_library():
    pytest.importorskip("gpytorch")
    row = step_time.fit_times(N=30, m=4, num_steps=3, warmup=1)
    assert row["fit_steps"] == 3
    assert min(row["pidkl_fit_s"], row["dkl_fit_s"], row["gpytorch_fit_s"]) > 0


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="no CUDA device on this machine"))])
def test_benchmark_case_runs_on_the_device_without_the_autograd_route(device):
    row = step_time.time_case(60, 5, repeats=1, device=device, autograd=False)
    assert row["device"] == device and "pidkl_autograd_step_s" not in row
    assert row["pidkl_step_s"] > 0 and row["dkl_step_s"] > 0
    assert ("peak_cuda_mib" in row) == (device == "cuda")


def test_speed_alternatives_fused_adam_reports_the_difference():
    import sys
    sys.path.insert(0, str(_PATH.parent))
    try:
        spec = importlib.util.spec_from_file_location("speed_alternatives",
                                                      _PATH.parent / "speed_alternatives.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        row = module.fused_adam()
    finally:
        sys.path.remove(str(_PATH.parent))
    assert row["case"] == "fused-adam" and row["max_loss_rel_diff"] < 1e-8
    assert row["adam_step_ms_foreach"] > 0 and row["adam_step_ms_fused"] > 0
    assert isinstance(row["params_apart"], dict)
