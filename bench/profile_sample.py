"""Kernel-level profile of the fast engine at the paper shape: prefill and decode, timed and traced.

A random-init model from the given config (bf16, LoRA r=32 as the preset trains it), 32 rows as in a train
step's turn. Times prefill (one new token) and decode (per step, from a 129-token call minus a 1-token call)
at two view lengths, with prefill's blocks around attention compiled (the default on CUDA) and eager, then prints
the CUDA kernels of one replayed decode step and of one prefill. With `--compare attention`, the two engines
are the decode attention kernel (`decode_attention`, the default where Triton runs) and the portable attention,
and the decode step's kernels are printed for both. `--compare packed`: prefill's attention over packed rows
through FlashAttention (`prefill_attention.Packed`, the default on CUDA) against SDPA over the masked block.
`--compare autotune`: the decode step's compiled halves as the engine compiles them, and under inductor's
max-autotune (Triton matmul templates benchmarked against cuBLAS); each engine's compile-and-capture time is
recorded. `--compare sampler`: the decode step's sampling in the split Triton kernel (`decode_sampling`, the default on
CUDA), as eager passes over the logits (the engine's path without it), and compiled by torch.compile.
`--compare padding`: rows of unequal views (lengths drawn between `--spread` below each view length and it, so
rows are left-padded as the chat and cut arms' rows are in one call), the decode attention reading each row's
own columns (the default) against reading every column below the filled count (`read_padding=True` on `StaticEngine.attend`).
`--compare splits`: the decode attention split as `decode_attention.splits_for` chooses for the batch (the
default) against the kernel before its splits (`bench/decode_attention_before.py`: chunks of 128 columns).
Writes JSON.

    python bench/profile_sample.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --out sample_profile.json
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from pathlib import Path

import torch


def cuda_time(fn, repeat=3):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(repeat):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / repeat


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compare", choices=("prefill", "attention", "packed", "autotune", "sampler", "padding", "splits"),
                    default="prefill")
    ap.add_argument("--spread", type=float, default=0.5,
                    help="--compare padding: a row's view is between (1 - spread) x and the full view length")
    args = ap.parse_args()
    import decode_attention_before as before
    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig, AutoModelForCausalLM

    import talktosolve.sampling.fast_engine as fe
    import talktosolve.sampling.fast_layers as fl
    from talktosolve.config import make_config
    from talktosolve.model.policy import make_trainable
    from talktosolve.sampling import decode_attention

    config = AutoConfig.from_pretrained(args.model_dir)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model = make_trainable(model.eval(), make_config("paper").model)
    # weights a prefill token goes through (the output layer reads only each row's last token)
    n_linear = sum(p.numel() for n, p in model.named_parameters() if "embed" not in n and "lora_" not in n)
    g = torch.Generator().manual_seed(0)
    B = args.batch
    spread = args.spread if args.compare == "padding" else 0.0
    # each view length's rows: one of the full length, the rest drawn below it (all of it when spread is 0)
    lengths = {n: [n] + torch.randint(int(n * (1 - spread)), n + 1, (B - 1,), generator=g).tolist()
               for n in (600, 1100)}
    views = {n: [torch.randint(0, 150000, (m,), generator=g).tolist() for m in lengths[n]] for n in (600, 1100)}
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": B, "rows": [],
           **({"spread": spread, "mean_view_tokens": {n: sum(m) / B for n, m in lengths.items()}} if spread else {})}
    engines = {}
    def compiled_sampling(engine):
        """The engine's eager Gumbel-max (uniform form) under torch.compile: one reduction, a program per row."""
        def gumbel(hidden, weight, temperature: float):
            logits = torch.nn.functional.linear(hidden, weight).float()
            return (logits / temperature - torch.log(-torch.log(torch.rand_like(logits)))).argmax(-1)
        compiled = torch.compile(gumbel)
        engine._pick = lambda hidden, s: (compiled(hidden, engine.weights.head, engine.temperature), None)

    autotuned = lambda: (torch.compile(fl.decode_qkv, mode="max-autotune-no-cudagraphs"),
                         torch.compile(fl.decode_out, mode="max-autotune-no-cudagraphs"))
    variants = {  # name: (engine options, what to change in the engine after it is built, or None)
        "prefill": (("compiled prefill blocks", {}, None),
                    ("eager prefill", {}, lambda e: setattr(e, "_blocks", (fl.qkv, fl.mlp_out)))),
        "attention": (("attention kernel", {"attention_kernel": True}, None),
                      ("portable attention", {"attention_kernel": False}, None)),
        "packed": (("packed prefill (flash varlen)", {"packed_prefill": True}, None),
                   ("masked prefill (SDPA)", {"packed_prefill": False}, None)),
        "autotune": (("decode compiled (default)", {}, None),
                     ("decode compiled max-autotune", {}, lambda e: setattr(e, "_decode_halves", autotuned()))),
        "sampler": (("sampling kernel (default)", {}, None),
                    ("eager sampling", {}, lambda e: setattr(e, "sampling_kernel", False)),
                    ("compiled sampling", {}, compiled_sampling)),
        "splits": (("attention split by the batch (default)", {}, None),
                   ("attention before its splits", {}, lambda e: setattr(e, "attend", before.attend))),
        "padding": (("own columns (default)", {}, None),
                    ("reading the padding", {}, lambda e: setattr(e, "attend", functools.partial(
                        decode_attention.attend, read_padding=True)))),
    }[args.compare]
    for name, options, setup in variants:
        eng = fe.StaticEngine(model, stop_ids=[0], pad_id=0, force_max_length=True, **options)
        if setup is not None:
            setup(eng)
        engines[name] = eng
        t0 = time.perf_counter()
        gen = torch.Generator(device="cuda").manual_seed(0)
        for n, v in views.items():  # compile (both lengths: dynamic shapes) and capture before timing
            eng.generate(v, 129, gen, capacity=1280)
        torch.cuda.synchronize()
        res.setdefault("compile_and_capture_s", {})[name] = time.perf_counter() - t0
        for n, v in views.items():
            one = cuda_time(lambda: eng.generate(v, 1, gen, capacity=1280))
            full = cuda_time(lambda: eng.generate(v, 129, gen, capacity=1280))
            row = {"engine": name, "view_tokens": n, "prefill_s": one, "decode_ms_per_step": 1000 * (full - one) / 128,
                   "prefill_tflops": 2 * n_linear * sum(map(len, v)) / one / 1e12}
            res["rows"].append(row)
            print({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
    for name in list(engines)[:1 if args.compare in ("prefill", "packed") else 3]:
        s = next(iter(engines[name].graphs.values()))
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                s["graph"].replay()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90)
        print(f"decode step x5 (graph replay), {name}:\n" + table, flush=True)
        res["decode_kernels" + ("" if args.compare in ("prefill", "packed") else f"/{name}")] = table.splitlines()
    for name, e in engines.items():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            e.generate(views[1100], 1, torch.Generator(device="cuda").manual_seed(0), capacity=1280)
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=90)
        print(f"prefill, {name}, {B} x 1100:\n" + table, flush=True)
        res[f"prefill_kernels/{name}"] = table.splitlines()
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
