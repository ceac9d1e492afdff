"""Rows that do not wait, by rule: one call's time with its rows moving as the engine moves them, as they moved
before, and not at all, on one GPU in one process.

A random-init model of the real Qwen2.5-1.5B-Instruct config (bf16) under the paper preset's LoRA (r=32 on every
linear layer, B drawn at random), in slot mode with `--slots` adapters, `--rows` rows in equal contiguous blocks
(twelve runs' turn: 384), each row's prompt `--prompt-tokens` random tokens, at most `--new-tokens` made. A random
model never ends a message, so the end token's logit gets log(`--stop-share` x vocabulary) added before sampling:
each token ends a row with about that chance, the rows' lengths spread as messages' do (most short, a few to the
limit). The rules:

  quarters   the engine's (`compaction.bucket`): the rows move once they fit a batch a quarter smaller, of a size
             2^k or 3 x 2^k (384 -> 256 -> 192 -> 128 -> 96 -> ...)
  halves     the rule before: once they fit a power of two at most half the batch (384 -> 128 -> 64 -> ...)
  whole      rows never move (`compact_rows=False`)

Each rule's engine draws the same random numbers per row (the sampling kernel keys them by the row's place in the
call), so the rules sample the same chats, up to the rounding of logits at other batch sizes (the JSON counts the
rows equal to the whole batch's). For each: a warm-up call (its graphs captured) and a warm-up prompt-only call,
then the median of `--repeat` calls less the median of as many calls that only read the prompts (one token
made). Prints a table and writes JSON.

    python bench/profile_moves.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --out moves.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
from random_model import random_lora_model, run_facts

from talktosolve.sampling import compaction, decode_sampling


def halves(live: int, rows: int, least: int) -> int | None:
    """The rule before: the next power of two, when it halves the batch."""
    size = max(least, 1 << max(live - 1, 0).bit_length())
    return size if 2 * size <= rows else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True, help="a folder with the model's config and tokenizer")
    ap.add_argument("--out", required=True)
    ap.add_argument("--slots", type=int, default=12)
    ap.add_argument("--rows", type=int, default=384)
    ap.add_argument("--prompt-tokens", type=int, default=800)
    ap.add_argument("--new-tokens", type=int, default=384)
    ap.add_argument("--stop-share", type=float, default=1 / 100, help="the share of the vocabulary that ends a row")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (a tiny config)")
    args = ap.parse_args()

    from transformers import AutoConfig

    from talktosolve.sampling.fast_engine import StaticEngine

    cuda = args.device == "cuda"
    config = AutoConfig.from_pretrained(args.model_dir)
    model = random_lora_model(config, args.device)
    g = torch.Generator().manual_seed(0)
    V = config.vocab_size
    stop = V - 1
    bias = torch.zeros(V, device=args.device)
    bias[stop] = math.log(args.stop_share * V)  # against V - 1 other logits of about the same size
    for name in ("sample", "sample_eager"):  # the engine's two samplers (the kernel on CUDA), each logits first
        real = getattr(decode_sampling, name)
        setattr(decode_sampling, name, lambda logits, *a, real=real, **k: real(logits + bias, *a, **k))
    prompts = [torch.randint(0, V, (args.prompt_tokens,), generator=g).tolist() for _ in range(args.rows)]
    adapters = [i * args.slots // args.rows for i in range(args.rows)]

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def call(eng, k):
        sync()
        t = time.perf_counter()
        out = eng.generate(prompts, k, torch.Generator(device=args.device).manual_seed(0), adapters=adapters)
        sync()
        return time.perf_counter() - t, out

    res = {**run_facts(args.device), "model": "Qwen2.5-1.5B-Instruct config, random init, bf16, LoRA r=32 all-linear",
           "slots": args.slots, "rows": args.rows, "prompt_tokens": args.prompt_tokens,
           "new_tokens": args.new_tokens, "stop_share": args.stop_share, "rules": []}
    engine_rule = compaction.bucket
    outs = {}
    for rule in ("whole", "halves", "quarters"):
        compaction.bucket = halves if rule == "halves" else engine_rule
        eng = StaticEngine(model, stop_ids=[stop], pad_id=0, slots=args.slots, compact_rows=rule != "whole")
        for j in range(args.slots):
            eng.store_adapter(j)
        warm, outs[rule] = call(eng, args.new_tokens)
        call(eng, 1)  # the prompt-only call warmed up too: the first engine's ran slower than the others'
        reads = statistics.median(call(eng, 1)[0] for _ in range(args.repeat))
        calls = [call(eng, args.new_tokens)[0] for _ in range(args.repeat)]
        res["rules"].append({"rule": rule, "first_call_s": warm, "prompt_read_s": reads, "call_s": calls,
                             "decode_s": statistics.median(calls) - reads, "graphs": len(eng.graphs),
                             "tokens": sum(map(len, outs[rule])),
                             "rows_equal_to_whole": sum(a == b for a, b in zip(outs[rule], outs["whole"]))})
        print(res["rules"][-1], flush=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
        del eng
        if cuda:
            torch.cuda.empty_cache()
    compaction.bucket = engine_rule
    lengths = sorted(map(len, outs["whole"]))
    res["row_lengths"] = {"mean": sum(lengths) / len(lengths), "median": lengths[len(lengths) // 2],
                          "at_limit": sum(n == args.new_tokens for n in lengths)}
    whole = res["rules"][0]["decode_s"]
    for r in res["rules"]:
        r["decode_over_whole"] = r["decode_s"] / whole
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"rows' lengths: mean {res['row_lengths']['mean']:.0f}, median {res['row_lengths']['median']}, "
          f"{res['row_lengths']['at_limit']} at the limit")
    print(f"{'rule':<10}{'decode s':>10}{'x whole':>9}{'graphs':>8}{'rows as whole':>15}")
    for r in res["rules"]:
        print(f"{r['rule']:<10}{r['decode_s']:>10.3f}{r['decode_over_whole']:>9.3f}{r['graphs']:>8}"
              f"{r['rows_equal_to_whole']:>15}")


if __name__ == "__main__":
    main()
