"""The benchmarks' stand-in for weights that cannot be downloaded here: a random-init model of a real config."""

from __future__ import annotations

import torch


def save_random_model(config, tokenizer, out: str, device: str = "cuda") -> str:
    """A model of `config` with random weights (bf16, torch seed 0) and `tokenizer`, saved to folder `out`, which
    `model.name_or_path` can then name. Random text never stops: benchmarks force message lengths."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
