"""DDP data-parallel training (torchrun, 2 CPU processes, gloo) against one process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch


SCRIPT = str(Path(__file__).resolve().parents[1] / "benchmarks" / "distributed_heat.py")


def _run(cmd, tmp_path):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed missing")
def test_two_process_ddp_matches_one_process(tmp_path):
    args = ["--N", "1500", "--steps", "400", "--M", "32", "--B", "128", "--threads", "1"]
    _run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
          "2", SCRIPT, *args, "--out", str(tmp_path / "ddp.json")],
         tmp_path)
    _run([sys.executable, SCRIPT, *args, "--out",
          str(tmp_path / "one.json")], tmp_path)
    ddp = json.loads((tmp_path / "ddp.json").read_text())
    one = json.loads((tmp_path / "one.json").read_text())
    assert ddp["world_size"] == 2 and one["world_size"] == 1
    # DDP keeps the replicas identical
    sums = [json.loads((tmp_path / f"ddp.json.rank{r}").read_text())["parameter_checksum"]
            for r in (0, 1)]
    assert sums[0] == pytest.approx(sums[1], rel=1e-12, abs=1e-9)
    # both learned the task (the test targets have sd 0.285) and agree within the
    # optimisation noise of 400 stochastic steps (at 250 they were 0.22 and 0.12: too early)
    assert ddp["rmse"] < 0.15 and one["rmse"] < 0.15
    assert abs(ddp["rmse"] - one["rmse"]) < 0.5 * max(ddp["rmse"], one["rmse"])
