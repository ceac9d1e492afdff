"""One numeric path for CPU runs, so that a CPU run's figures repeat bit for bit whatever the machine's cores and
instruction set. Measured to hold across AVX-512, AVX2 and SSE4.2 settings of one Intel Xeon; not across makers:
on an AMD EPYC, chat runs part late in training from a record made on that Xeon (so `record` names the processor).

Left alone, torch picks its CPU kernels by the instruction set (AVX-512 where there is one), MKL picks its matrix
products by the processor (its model and its maker), and a sum split over threads adds in an order their count
sets. Each rounds differently in the last bits; one day a sampled token tips, and the run goes another way. So a
CPU run pins, before torch runs its first operation:

- `ATEN_CPU_CAPABILITY=avx2`: torch's kernels at the AVX2 level, which x86-64 processors have had since 2013
  (Intel) and 2015 (AMD). A CPU without it runs torch's default kernels (`run.versions.cpu_capability` says so).
- `MKL_CBWR=COMPATIBLE`: MKL's SSE2 branch, the one its documentation says gives the same results on Intel and
  AMD processors (its AVX2 branch holds for Intel's alone).
- one thread (`OMP_NUM_THREADS=1`): the same sums on any number of cores, and no thread spinning on a core that
  another process needs; `parallel_runs=N` trains N runs at once on N cores, with the same results.

torch reads the kernel level at its first dispatch, MKL its branch at its first call, and OpenMP the thread count
as torch loads, so the CLI pins before it imports torch (`cli.command_config`); `recipe.run_recipe` pins too, and warns
when torch had already chosen its kernels. oneDNN, whose paths also depend on the CPU, is not on a float32 CPU
run's path (`ONEDNN_VERBOSE=1` prints nothing), so it is left alone. What each knob changed, measured:
docs/performance.md#one-numeric-path-on-every-cpu. `TALKTOSOLVE_NATIVE_CPU=1` turns the pins off: this CPU's
fastest kernels and torch's thread count, figures that repeat only on a like machine.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path

PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"}
"""The environment of a pinned CPU run, on x86-64 (elsewhere the thread count alone: MKL and AVX2 are x86's)."""
NATIVE = "TALKTOSOLVE_NATIVE_CPU"
"""Set to 1, no pins."""

_when: str | None = None  # how this process was pinned, for the record: see `record`


def is_cpu_run(device: str) -> bool:
    """Whether a run on `device` (a config's `device`) runs on the CPU, told without importing torch: `auto` is
    the CPU unless torch is a build that can use a GPU and a GPU's driver is present."""
    if device != "auto":
        return device == "cpu"
    if "torch" in sys.modules:
        return not sys.modules["torch"].cuda.is_available()
    if os.environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return True
    try:
        if "+cpu" in importlib.metadata.version("torch"):
            return True
    except importlib.metadata.PackageNotFoundError:
        return True
    return not any(Path(p).exists() for p in ("/dev/nvidiactl", "/dev/kfd"))  # NVIDIA's, ROCm's


def pins() -> dict[str, str]:
    """The pins on this machine: all of `PINS` on x86-64, the thread count elsewhere."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return dict(PINS)
    return {"OMP_NUM_THREADS": PINS["OMP_NUM_THREADS"]}


def pin_cpu() -> None:
    """Pin this process, and the processes it starts, to the one numeric path (unless `TALKTOSOLVE_NATIVE_CPU=1`).

    In time only before torch's first operation; a process that imported torch first gets its thread count set
    here, and `late` says whether its kernels were chosen already."""
    global _when
    if os.environ.get(NATIVE) == "1":
        _when = "off"
        return
    os.environ.update(pins())
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(int(PINS["OMP_NUM_THREADS"]))
    if _when is None:
        _when = "after torch was imported" if "torch" in sys.modules else "before torch was imported"


def late() -> str | None:
    """What missed the pins, in words (None when nothing did): torch's kernels chosen before they were pinned."""
    import torch

    if _when in (None, "off") or "ATEN_CPU_CAPABILITY" not in pins():
        return None
    chosen = torch.backends.cpu.get_cpu_capability()
    if chosen in ("AVX2", "DEFAULT"):  # DEFAULT: a CPU without AVX2, which the pin cannot change
        return None
    return (f"torch chose its {chosen} kernels before talktosolve pinned them to AVX2, so this CPU run's figures "
            "may not repeat on another CPU; start from the CLI, or call talktosolve.cpu_pins.pin_cpu() before torch "
            "runs anything (results.json's run.cpu records what ran)")


def processor() -> dict:
    """The CPU this process runs on: its maker and model as the OS names them, and whether it has AVX-512 (which
    the pins keep torch from using). Pinned runs repeat bit for bit on one machine; across machines they have
    parted late in training, so a record names the machine its figures came from."""
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
            if not line.strip():  # the first processor's block is enough
                break
    except OSError:  # not Linux
        pass
    flags = info.get("flags", "").split()
    return {"vendor": info.get("vendor_id") or platform.system(),
            "model": info.get("model name") or platform.processor() or platform.machine(),
            "avx512": "avx512f" in flags if flags else None}


def record() -> dict:
    """What ran, for results.json (`run.cpu`): the pins' variables as set, when they were set, torch's threads,
    the processor."""
    import torch

    return {"pins": {name: os.environ.get(name) for name in PINS}, "pinned": _when or "no",
            "threads": torch.get_num_threads(), "processor": processor()}
