"""Helpers the tests share (plain functions; fixtures live in conftest.py): tiny random Qwen2 models, with or
without a LoRA adapter, random prompts, transformers' own greedy decoding to hold the engines against, and the
recipe command as a user runs it."""

import os
import sys
from pathlib import Path

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM


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
