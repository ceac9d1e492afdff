"""Helpers the tests share (plain functions; fixtures live in conftest.py): tiny random Qwen2 models, with or
without a LoRA adapter, random prompts, transformers' own greedy decoding to hold the engines against, and the
recipe command as a user runs it (and as `kill -9` interrupts it: `kill_and_rerun`), and a script run under
Triton's interpreter (`interpreted`)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


def bench_script(name: str):
    """bench/NAME.py loaded as a module (bench/ is scripts, not a package). bench/ is on sys.path while it loads, as
    it is when the script runs, so that its imports of other bench scripts resolve."""
    import importlib.util

    bench = Path(__file__).resolve().parents[1] / "bench"
    spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(bench))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(bench))
    return module


def tiny(vocab=97, device="cpu", dtype=torch.float32, layers=2):
    """A random-weight Qwen2 model of `layers` layers (hidden 64, 4 query and 2 KV heads), the same for a seed."""
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).to(device=device, dtype=dtype).eval()


def prompts(vocab, lengths, seed=1):
    """Random prompts of these lengths (ids from 1: 0 pads)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, vocab, (n,), generator=g).tolist() for n in lengths]


def stock_greedy(model, prompt, n):
    """transformers' greedy `generate`: exactly `n` tokens after one prompt."""
    ids = torch.tensor([prompt], device=model.device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                         do_sample=False, pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def hf_greedy(model, batch: list[list[int]], limit: int, stops: list[int]) -> list[list[int]]:
    """transformers' greedy `generate` over the left-padded prompts, each row ending at its first stop id (kept)
    or at the limit."""
    from talktosolve.sampling.engine import cut_at_stop, left_pad

    ids, mask = left_pad(batch, stops[0], model.device)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=limit, do_sample=False, eos_token_id=stops,
                         pad_token_id=stops[0])
    return cut_at_stop(out[:, ids.shape[1]:].tolist(), stops)


def lora_model(r=4, layers=2, device="cpu", dtype=torch.float32):
    """`tiny` under a fresh LoRA adapter of rank `r` on every linear layer."""
    from peft import LoraConfig, get_peft_model

    return get_peft_model(tiny(device=device, dtype=dtype, layers=layers),
                          LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear"))


def set_adapter_weights(model, seed, scale=0.3):
    """Fill the live adapter with run `seed`'s weights (both A and B, so every LoRA term matters)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn(p.shape, generator=g).to(p) * scale)


def recipe_command(out: Path, preset: str) -> list[str]:
    """`talktosolve recipe --preset PRESET --out OUT --quiet` in a process of its own, as a user runs it."""
    return [sys.executable, "-m", "talktosolve.cli", "recipe", "--preset", preset, "--out", str(out), "--quiet"]


def recipe_env() -> dict:
    # The CLI pins every process's threads and kernels (cpu_pins), so CPU float sums are split alike in each.
    return {**os.environ, "PYTHONHASHSEED": "0"}


def stage_outputs(out: Path) -> int:
    """How many stage outputs a recipe folder holds so far."""
    return sum(len(list(out.glob(pattern))) for pattern in
               ("runs/*/checkpoints/step-*", "runs/*/done.json", "evals/*/summary.json", "results.json"))


TIME_FIELDS = {"started", "finished", "wall_seconds", "train_seconds", "gpu_seconds", "seconds"}


def strip_times(obj):
    if isinstance(obj, dict):
        return {k: strip_times(v) for k, v in obj.items() if k not in TIME_FIELDS}
    if isinstance(obj, list):
        return [strip_times(v) for v in obj]
    return obj


def kill_and_rerun(out: Path, preset: str, n_kills: int, ref: Path, results: dict, total: int) -> None:
    """Run `preset` into `out`, `kill -9` it `n_kills` times at moments spread over the whole run, rerun it to the
    end, and hold its results.json and logs to the uninterrupted run's (`ref`, its `results`, `total` stage
    outputs)."""
    want = strip_times(results)
    rng = random.Random(0)
    kills = 0
    # Kill at moments spread over the whole run (start-up, training, evaluation, report), then let it finish.
    for target in sorted(rng.sample(range(0, total - 2), n_kills)):
        proc = subprocess.Popen(recipe_command(out, preset), env=recipe_env(), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None and stage_outputs(out) <= target:
            time.sleep(0.05)
        time.sleep(rng.uniform(0.0, 0.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    done = subprocess.run(recipe_command(out, preset), env=recipe_env(), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    got = strip_times(json.loads((out / "results.json").read_text()))
    print(f"\nresume: {kills} kill -9s survived; results.json identical to the uninterrupted run")
    assert kills == n_kills
    differ = sorted(k for k in want["evals"] if got["evals"][k] != want["evals"][k])
    sums = {r.name: (json.loads((ref / "runs" / r.name / "done.json").read_text())["weights_checksum"],
                     json.loads((r / "done.json").read_text())["weights_checksum"]) for r in (out / "runs").iterdir()}
    assert got == want, f"evaluations that differ: {differ}; weights (uninterrupted, resumed): {sums}"
    # And the logs hold each step exactly once.
    for run in (out / "runs").iterdir():
        steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert steps == sorted(set(steps))


def interpreted(script: str, timeout: int = 600) -> None:
    """Run `script` in a fresh Python from the repository's root under Triton's interpreter (Triton kernels on a
    CPU); it must exit 0 and print "ok" last. Skips where Triton is not installed."""
    import pytest

    pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[test]' on Linux x86-64)")
    out = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]
