"""Where a many-run decode step's time goes: its cost by batch size, and its kernels by kind.

A random-init model of the real Qwen2.5-1.5B-Instruct config (bf16) under the paper preset's LoRA (r=32 on every
linear layer, B drawn at random so that each adapter is live), in slot mode with `--slots` adapters (twelve runs in
one process: 12), the rows spread over the slots in equal contiguous blocks. Every row's prompt is
`--prompt-tokens` random tokens (a late turn's view: a final's prompt holds the problem and both messages),
and `--new-tokens` are forced after it (no row stops, so no row moves: the batch is the state's). For each batch
size in `--rows` (a twelve-run turn's 384 and the smaller states its rows move into), ms per decode step =
(an n-token call - a 1-token call) / (n - 1), both calls replaying one graph. Then one decode step of the first
batch size, replayed from its CUDA graph five times under the profiler, its kernels grouped by kind:

  sampling    `decode_sampling`'s two kernels
  attention   `decode_attention`'s two kernels
  matmul      cuBLAS's (the layers' weights with the slots' A stacked under them, the slots' B, the output layer)
  fused       the element-wise work torch.compile fused into Triton kernels (norms, rotary, SwiGLU, residuals)
  other       copies, fills, index updates

and the least a timed step must read (the weights and every slot's adapter once, each row's K/V over its filled
columns, on average over the timed steps), in GB, against its time. Prints a table and writes JSON. `--device cpu`
with a tiny config is a smoke run of the script itself (no graph there: the profiled step runs eagerly, and its
"kernels" are the CPU's operators).

    python bench/profile_decode.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --out decode.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from random_model import random_lora_model, run_facts

KINDS = {  # kind: substrings of a kernel's name, the first match wins (the sampling kernel's name holds "_partial")
    "sampling": ("_gumbel",),
    "attention": ("_partial", "_combine"),
    "matmul": ("gemm", "nvjet", "cutlass", "xmma", "cublas", "aten::mm", "aten::addmm", "aten::bmm"),
    "fused": ("triton_",),
}


def kind(name: str) -> str:
    for k, marks in KINDS.items():
        if any(m in name for m in marks):
            return k
    return "other"


def kernels_by_kind(events, replays: int, device: str = "cuda") -> tuple[dict, list]:
    """Profiler averages -> (microseconds a step by kind, the kernels' rows a step, longest first)."""
    rows = []
    for e in events:
        us = e.self_device_time_total if device == "cuda" else e.self_cpu_time_total
        if us > 0 and e.count:
            rows.append({"name": e.key, "kind": kind(e.key), "us_per_step": us / replays,
                         "launches_per_step": e.count / replays})
    rows.sort(key=lambda r: -r["us_per_step"])
    by = {k: 0.0 for k in (*KINDS, "other")}
    for r in rows:
        by[r["kind"]] += r["us_per_step"]
    return by, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True, help="a folder with the model's config and tokenizer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--slots", type=int, default=12, help="LoRA adapters in the engine (runs in one process)")
    ap.add_argument("--rows", default="384,256,192,128,64,32,16",
                    help="batch sizes timed, comma-separated; the first is profiled")
    ap.add_argument("--prompt-tokens", type=int, default=800)
    ap.add_argument("--new-tokens", type=int, default=129)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    sizes = [int(r) for r in args.rows.split(",")]
    if args.slots < 1 or min(sizes) < args.slots:
        raise SystemExit(f"every batch size needs at least one row a slot: --rows {args.rows}, --slots {args.slots}")

    from torch.profiler import ProfilerActivity, profile
    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.sampling.fast_engine import StaticEngine

    config = AutoConfig.from_pretrained(args.model_dir)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    cuda = args.device == "cuda"
    model = random_lora_model(config, args.device)
    eng = StaticEngine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True,
                       slots=args.slots)
    for j in range(args.slots):
        eng.store_adapter(j)
    n, P = args.new_tokens, args.prompt_tokens
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, min(150000, config.vocab_size), (P,), generator=g).tolist() for _ in range(max(sizes))]

    def call(rows: int, k: int) -> float:
        """ms of one call of `rows` rows making `k` tokens."""
        adapters = [i * args.slots // rows for i in range(rows)]
        gen = torch.Generator(device=args.device).manual_seed(0)
        sync()
        t = time.perf_counter()
        eng.generate(prompts[:rows], k, gen, capacity=P + n, adapters=adapters)
        sync()
        return 1e3 * (time.perf_counter() - t)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    res = {**run_facts(args.device), "model": "Qwen2.5-1.5B-Instruct config, random init, bf16, LoRA r=32 all-linear",
           "slots": args.slots, "prompt_tokens": P, "new_tokens": n, "rows": []}
    for rows in sizes:
        for k in (n, 1):  # compile and capture first
            call(rows, k)
        one, full = (min(call(rows, k) for _ in range(3)) for k in (1, n))
        res["rows"].append({"rows": rows, "ms_per_step": (full - one) / (n - 1), "prefill_ms": one})
        print(res["rows"][-1], flush=True)

    B = sizes[0]
    L = next(L for (b, L) in eng.graphs if b == B)
    s = eng.graphs[(B, L)]
    replays = 5
    call(B, 1)  # the state's rows just read: the replayed steps write the columns after their prompts
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(replays):
            s["graph"].replay() if cuda else eng._decode_step(s)
            sync()
    by, kernels = kernels_by_kind(prof.key_averages(), replays, args.device)
    step_ms = res["rows"][0]["ms_per_step"]
    kv_token = 2 * len(eng.layers) * eng.n_kv * eng.head_dim * eng.embed.element_size()  # K and V, all layers
    # the base once (the output layer shares the embedding's tensor) and every slot's adapter, in bf16
    base = sum(p.numel() for name, p in model.named_parameters() if "lora_" not in name)
    adapter = sum(p.numel() for name, p in model.named_parameters() if "lora_" in name)
    weights = (base + args.slots * adapter) * eng.embed.element_size()
    filled = P + n / 2  # the columns a row attends over, on average over the timed steps
    res["profiled"] = {
        "rows": B, "kv_length": L, "replays": replays,
        "columns_attended_mean": P + (replays + 1) / 2,  # its replays attend over P + 1 .. P + replays columns
        "us_per_step_by_kind": by, "kernels_us_per_step": sum(by.values()),
        "share_by_kind": {k: v / sum(by.values()) for k, v in by.items()},
        "least_read_gb": {"weights_and_adapters": weights / 1e9, "kv": B * filled * kv_token / 1e9},
        "kernels": kernels[:40],
    }
    least = sum(res["profiled"]["least_read_gb"].values())
    res["profiled"]["least_read_gb_per_s_at_step_time"] = least / (step_ms / 1e3)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{'rows':>6}{'ms/step':>9}{'prefill ms':>12}")
    for r in res["rows"]:
        print(f"{r['rows']:>6}{r['ms_per_step']:>9.3f}{r['prefill_ms']:>12.1f}")
    print(f"\none step at {B} rows, {L} columns: {step_ms:.3f} ms timed, kernels {sum(by.values()) / 1e3:.3f} ms")
    for k, us in by.items():
        print(f"  {k:<10}{us / 1e3:>8.3f} ms  {100 * us / sum(by.values()):>5.1f}%")
    print(f"  least read: weights and adapters {res['profiled']['least_read_gb']['weights_and_adapters']:.2f} GB, "
          f"K/V {res['profiled']['least_read_gb']['kv']:.2f} GB: {least / (step_ms / 1e3):.0f} GB/s at the step's time")


if __name__ == "__main__":
    main()
