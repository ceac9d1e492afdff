"""Which engine a model gets: the static engine (`fast_engine`) for the decoders it supports, the portable one
(`engine`) for the rest, and whether several runs' adapters can share one (slot mode)."""

from __future__ import annotations

from talktosolve.model.policy import base_model
from talktosolve.sampling.engine import Engine
from talktosolve.sampling.fast_engine import SUPPORTED, StaticEngine


def slot_mode_fits(model, kind: str = "auto") -> bool:
    """Whether `make_engine(model, kind=kind, slots=n)` can build a slot-mode engine for this LoRA model."""
    base = base_model(model)
    head = base.get_output_embeddings()
    return (getattr(base.config, "model_type", "") in SUPPORTED and kind != "portable"
            and any(hasattr(m, "lora_A") for m in base.modules()) and not hasattr(head, "lora_A"))


def make_engine(model, *, stop_ids, pad_id, temperature=1.0, force_max_length=False, kind: str = "auto",
                slots: int = 0):
    """`kind` auto: the static engine for supported architectures (CUDA graphs on a GPU, the same step run
    eagerly on a CPU, where it is still faster than transformers' forward), the portable `Engine` otherwise.
    `slots` > 0: the static engine in slot mode (several runs' adapters), which the portable one has not."""
    base = base_model(model)
    supported = getattr(base.config, "model_type", "") in SUPPORTED
    if (kind == "fast" or slots) and not supported:
        what = "chat.engine=fast" if kind == "fast" else "several runs in one process (train.runs_per_process)"
        raise ValueError(f"{what} needs the static engine, which supports {SUPPORTED} models, not "
                         f"`{base.config.model_type}`.")
    if slots and kind == "portable":
        raise ValueError("several runs in one process (train.runs_per_process > 1) need chat.engine auto or fast.")
    if kind == "fast" or (kind == "auto" and supported):
        return StaticEngine(model, stop_ids=stop_ids, pad_id=pad_id, temperature=temperature,
                            force_max_length=force_max_length, slots=slots)
    return Engine(model, stop_ids=stop_ids, pad_id=pad_id, temperature=temperature,
                  force_max_length=force_max_length)

