"""The benchmarks' stand-ins: a random-init model of a real config for weights that cannot be downloaded here,
and rewards for a model that never answers right."""

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


def random_lora_model(config, device: str = "cuda"):
    """A model of `config` with random weights (torch seed 0; bf16 on CUDA, fp32 elsewhere) under the paper preset's
    LoRA, every adapter weight drawn too: B is zero at init, which would leave an adapter without effect and hide a
    wrong LoRA term."""
    from transformers import AutoModelForCausalLM

    from talktosolve.config import make_config
    from talktosolve.model.policy import make_trainable

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    model = make_trainable(model, make_config("paper").model)
    for p in model.parameters():
        if p.requires_grad:
            p.data.normal_(0, 0.02)
    return model


def run_facts(device: str = "cuda") -> dict:
    """What a benchmark JSON records about where it ran: the date, the GPU and the library versions."""
    import datetime
    import platform

    import peft
    import transformers

    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu": torch.cuda.get_device_name() if device == "cuda" else None, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}


def stand_in_rewards() -> None:
    """Make every group's rewards differ, for the whole process. A random model never answers right, so every
    advantage would be 0 and the learner, which skips zero-advantage messages (`grpo`), would read nothing:
    chat k of each group scores k % 2 instead, so every message is trained (the learning phase's worst case).
    Grading itself (a few ms a step) is then not timed."""
    import talktosolve.team.reward as reward

    def score(chats, protocol):
        for c in chats:
            right = c.index % 2 == 1
            c.answers = {seat: None for seat in protocol.seats}
            c.correct = {seat: right for seat in protocol.seats}
            c.reward = float(right)

    reward.score_chats = score
