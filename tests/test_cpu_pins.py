"""A CPU run is pinned to one numeric path before torch loads, and results.json records what ran."""

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from talktosolve import cpu_pins
from talktosolve.cpu_pins import PINS, is_cpu_run, pin_cpu, record

X86 = platform.machine().lower() in ("x86_64", "amd64")

# The CLI's own first steps on `train`, then torch: what the process holds when torch runs its first operation.
CLI_THEN_TORCH = """
import json, os, sys
from talktosolve.cli import command_config, build_parser
command_config(build_parser().parse_args(["train", "--preset", "micro", "--arm", "chat", "--out", sys.argv[1]]))
before = "torch" in sys.modules
import torch
torch.ones(2).exp()
print(json.dumps({"torch_before": before, "env": {k: os.environ.get(k) for k in %r},
                  "threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability()}))
""" % list(PINS)


def cli_then_torch(tmp_path, **env) -> dict:
    # Settings a user's shell might hold, which the pins must override.
    base = {k: v for k, v in os.environ.items() if k != cpu_pins.NATIVE}
    env = {**base, "OMP_NUM_THREADS": "4", "MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "avx512", **env}
    done = subprocess.run([sys.executable, "-c", CLI_THEN_TORCH, str(tmp_path / "run")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_cli_pins_a_cpu_run_before_torch_loads(tmp_path):
    got = cli_then_torch(tmp_path)
    assert not got["torch_before"]
    assert got["threads"] == 1
    if X86:
        assert got["env"] == PINS
        assert got["capability"] in ("AVX2", "DEFAULT")  # DEFAULT: a CPU without AVX2
    else:
        assert got["env"]["OMP_NUM_THREADS"] == "1"


def test_talktosolve_native_cpu_leaves_the_cpu_as_it_is(tmp_path):
    got = cli_then_torch(tmp_path, **{cpu_pins.NATIVE: "1"})
    assert got["env"] == {"OMP_NUM_THREADS": "4", "MKL_CBWR": "AUTO", "ATEN_CPU_CAPABILITY": "avx512"}


def test_only_cpu_runs_are_pinned():
    assert is_cpu_run("cpu") and not is_cpu_run("cuda") and not is_cpu_run("cuda:1")
    assert is_cpu_run("auto") == (not torch.cuda.is_available())


def test_results_record_the_pins_and_threads(monkeypatch):
    from jsonschema import validate

    from talktosolve.config import make_config
    from talktosolve.experiment.assemble import run_facts
    from talktosolve.protocol import protocol_of

    for name in PINS:  # restored after the test
        monkeypatch.setenv(name, "unset")
    monkeypatch.delenv(cpu_pins.NATIVE, raising=False)
    monkeypatch.setattr(cpu_pins, "_when", None)
    threads = torch.get_num_threads()
    try:
        pin_cpu()
        cfg = make_config("micro")
        facts = run_facts(cfg, protocol_of(cfg.chat), 1.0, 0.5)
        assert facts["cpu"] == record()
        assert facts["cpu"]["threads"] == 1 and facts["cpu"]["pinned"] == "after torch was imported"
        assert facts["cpu"]["pins"]["OMP_NUM_THREADS"] == "1"
        assert facts["cpu"]["processor"]["model"] and facts["cpu"]["processor"]["vendor"]
        if X86:
            assert facts["cpu"]["pins"] == PINS
    finally:
        torch.set_num_threads(threads)
    schema = json.loads((Path(cpu_pins.__file__).parent / "experiment" / "results.schema.json").read_text())
    stamps = {"started": "2026-12-03T00:00:00+00:00", "finished": "2026-12-03T00:01:00+00:00"}  # the recipe's
    validate({**facts, **stamps}, {**schema["properties"]["run"], "$defs": schema["$defs"]})


@pytest.mark.skipif(not X86, reason="the kernel level is x86's")
def test_pins_set_after_torch_chose_its_kernels_are_named_late(monkeypatch):
    monkeypatch.setattr(cpu_pins, "_when", "after torch was imported")
    chosen = torch.backends.cpu.get_cpu_capability()  # chosen long ago in this process
    assert (cpu_pins.late() is None) == (chosen in ("AVX2", "DEFAULT"))
