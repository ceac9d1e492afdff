"""`bench/profile_decode.py` times a slot-mode decode step by batch size and sorts one step's kernels by kind."""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from helpers import bench_script

profile_decode = bench_script("profile_decode")


def test_kernels_are_sorted_into_kinds_by_name_and_counted_per_step():
    event = lambda key, us, count: SimpleNamespace(key=key, self_device_time_total=us, count=count)
    events = [event("_partial", 300.0, 10), event("_gumbel_partial", 50.0, 5), event("nvjet_sm90_tst_TNN", 200.0, 10),
              event("triton_poi_fused_add_0", 40.0, 10), event("Memset (Unknown)", 5.0, 5),
              event("cudaLaunchKernel", 0.0, 10)]  # host-side: no device time, left out
    by, rows = profile_decode.kernels_by_kind(events, replays=5)
    # the sampling kernel's name holds "_partial" too: it is sampling, not attention
    assert by == {"attention": 60.0, "sampling": 10.0, "matmul": 40.0, "fused": 8.0, "other": 1.0}
    assert [r["name"] for r in rows][:2] == ["_partial", "nvjet_sm90_tst_TNN"]
    assert rows[0]["launches_per_step"] == 2


def test_a_cpu_smoke_run_writes_every_batch_size_and_the_profiled_step(tiny_model_dir, tmp_path):
    out = tmp_path / "decode.json"
    bench = Path(__file__).resolve().parents[1] / "bench"
    subprocess.run([sys.executable, str(bench / "profile_decode.py"), "--model-dir", str(tiny_model_dir), "--out",
                    str(out), "--device", "cpu", "--rows", "6,4", "--slots", "2", "--prompt-tokens", "20",
                    "--new-tokens", "9"], check=True, capture_output=True, cwd=bench)
    res = json.loads(out.read_text())
    assert [r["rows"] for r in res["rows"]] == [6, 4] and all(r["ms_per_step"] > 0 for r in res["rows"])
    assert res["profiled"]["rows"] == 6 and res["profiled"]["kernels_us_per_step"] > 0
    assert res["profiled"]["us_per_step_by_kind"]["matmul"] > 0  # the CPU's matrix products are named too

