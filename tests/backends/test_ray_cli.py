"""``cel-lens search --backend ray --json``: stdout carries the JSON alone, although the Ray actors
print while they build their replicas (Ray forwards an actor's output to the driver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


@pytest.mark.slow  # starts a local Ray instance with one actor: ~30-90 s
def test_ray_json_stdout_is_json_only(tmp_path):
    pytest.importorskip("ray", reason="the Ray backend needs Ray (pip install 'cel_lens[ray]')")
    out = tmp_path / "run"
    cmd = [
        sys.executable, "-m", "cel_lens.cli", "search", "--model", "organism", "--dtype", "float64",
        "--task", "organism_a", "--n-dist", "12", "--n-test", "12", "--k", "1", "--pool", "2", "--n-null", "2",
        "--backend", "ray", "--workers", "1", "--no-progress", "--json", "--out", str(out),
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)  # nothing but the JSON
    assert result == json.loads((out / "result.json").read_text())
    # the actor did print (loading the organism in float64 changes its dtype), on stderr
    printed = [line for line in proc.stderr.splitlines() if "Changing model dtype to torch.float64" in line]
    assert printed and all("ShardWorker pid=" in line for line in printed), proc.stderr[-3000:]
