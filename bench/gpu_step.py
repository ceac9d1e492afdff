"""GPU benchmark of the paper preset's shape (issues 2 and 7), in one process, on one GPU.

A random-init model built from the real Qwen2.5-1.5B-Instruct config (bf16, sdpa) with the real tokenizer;
message lengths are forced to their maximum (random text never stops). Measured side by side:

  decode/stock_dynamic   transformers `generate`, default dynamic cache, sampling (the baseline)
  decode/stock_static    `generate` with cache_implementation="static" (auto-compiled; two warm-up calls)
  decode/fast_eager      talktosolve's StaticEngine without torch.compile (CUDA graph decode, Gumbel-max)
  decode/fast            the same with each decode layer compiled (the default on CUDA)
  learn                  one GRPO update over 128 messages (8 problems x 4 chats x 4 turns) of ~600 tokens
  step                   the real `train` loop for 2 steps: 8 x 4 chats x 4 turns at 160/160/384/384 tokens

Prints a table and writes JSON (with date, GPU and library versions). Usage:
  python bench/gpu_step.py --model-dir DIR_WITH_CONFIG_AND_TOKENIZER --gsm8k GSM8K_DIR --out bench.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import tempfile
import time
from pathlib import Path

import torch


def cuda_time(fn, repeat=1):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / repeat, out


def decode_ms(fn_prefill_only, fn_full, n_new):
    """Per-decode-step time: (full - prefill-only) / (n_new - 1)."""
    t_full, _ = cuda_time(fn_full)
    t_pre, _ = cuda_time(fn_prefill_only)
    return 1000 * (t_full - t_pre) / (n_new - 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-static", action="store_true")
    args = ap.parse_args()

    import peft
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from talktosolve.config import make_config
    from talktosolve.fast_engine import StaticEngine
    from talktosolve.grpo import Sample, grpo_update
    from talktosolve.policy import make_trainable

    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name(), "versions": {"python": platform.python_version(),
           "torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
           "model": "Qwen2.5-1.5B-Instruct config, random init, bf16, sdpa"}
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    config = AutoConfig.from_pretrained(args.model_dir)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    res["params"] = n_params
    g = torch.Generator().manual_seed(0)
    prompt_len = 300

    def batch(b, n=prompt_len):
        return [torch.randint(0, 150000, (n,), generator=g).tolist() for _ in range(b)]

    rows = []
    # ---- decode: stock generate (dynamic cache), the baseline
    for b in (32,):
        prompts = torch.tensor(batch(b), device="cuda")
        n_new = 64

        def gen(n, **kw):
            return lambda: model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                          max_new_tokens=n, min_new_tokens=n, pad_token_id=0, **kw)
        gen(4)()
        ms = decode_ms(gen(1), gen(n_new), n_new)
        rows.append(("decode/stock_dynamic", b, ms))
        if not args.skip_static:
            try:
                gen(8, cache_implementation="static")()
                gen(8, cache_implementation="static")()
                ms = decode_ms(gen(1, cache_implementation="static"), gen(n_new, cache_implementation="static"), n_new)
                rows.append(("decode/stock_static", b, ms))
            except Exception as e:  # noqa: BLE001 - record, keep benchmarking
                res["stock_static_error"] = repr(e)[:300]
    # ---- decode: the fast engine, plain model and through a LoRA adapter (refresh included)
    cfg = make_config("paper")
    lora_model = make_trainable(model, cfg.model)
    for b, compiled in ((32, False), (32, True), (128, True)):
        eng = StaticEngine(lora_model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True,
                           compile=compiled)
        prompts = batch(b)
        gen_ = torch.Generator(device="cuda").manual_seed(0)
        cap = prompt_len + 384  # one KV shape for both timed calls: the graph is captured (and compiled) once
        eng.generate(prompts, 384, gen_, capacity=cap)
        eng.generate(prompts, 1, gen_, capacity=cap)
        ms = decode_ms(lambda: eng.generate(prompts, 1, gen_, capacity=cap),
                       lambda: eng.generate(prompts, 384, gen_, capacity=cap), 384)
        rows.append(("decode/fast" if compiled else "decode/fast_eager", b, ms))
        t_ref, _ = cuda_time(eng.refresh)
        res[f"lora_refresh_ms_b{b}"] = 1000 * t_ref
        del eng
        torch.cuda.empty_cache()
    res["decode"] = [{"engine": n, "batch": b, "ms_per_step": ms, "tokens_per_s": b * 1000 / ms} for n, b, ms in rows]
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print("decode:", res["decode"], flush=True)
    # ---- learning: one GRPO update over 128 messages of ~600 tokens (LoRA r=32, 2 chats per micro-batch)
    opt = torch.optim.AdamW([p for p in lora_model.parameters() if p.requires_grad], lr=1e-4)
    lens = torch.randint(450, 650, (128,), generator=g).tolist()
    samples = [Sample(batch(1, n - 150)[0], batch(1, 150)[0], (i % 4 - 1.5) / 4, i // 4) for i, n in enumerate(lens)]
    torch.cuda.reset_peak_memory_stats()
    grpo_update(lora_model, opt, samples[:16], pad_id=tok.pad_token_id, chats_per_microbatch=2, grad_clip=1.0,
                device="cuda")  # warm-up
    t_learn, _ = cuda_time(lambda: grpo_update(lora_model, opt, samples, pad_id=tok.pad_token_id,
                                               chats_per_microbatch=2, grad_clip=1.0, device="cuda"))
    n_tok = sum(lens)
    flops = 4 * n_params * n_tok  # forward 2N + input-gradient backward 2N per token (LoRA grads negligible)
    res["learn"] = {"seconds": t_learn, "tokens": n_tok, "tokens_per_s": n_tok / t_learn,
                    "tflops": flops / t_learn / 1e12, "share_of_bf16_peak_989": flops / t_learn / 989e12,
                    "peak_gb": torch.cuda.max_memory_allocated() / 2**30}
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print("learn:", res["learn"], flush=True)
    del lora_model, model, opt
    torch.cuda.empty_cache()
    # ---- the real train loop: 2 steps of the paper preset at maximum message lengths
    from talktosolve.tasks import load_problems
    from talktosolve.train import train

    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        with torch.device("cuda"):
            m = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        m.save_pretrained(f"{tmp}/model")
        tok.save_pretrained(f"{tmp}/model")
        del m
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        cfg = make_config("paper", {"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                                    "data": {"gsm8k": args.gsm8k}, "train": {"steps": 2}})
        train_set, _, _ = load_problems(cfg, Path(tmp) / "data")
        run = Path(tmp) / "run"
        t0 = time.perf_counter()
        train(cfg, "chat", 0, run, train_set, progress=False)
        wall = time.perf_counter() - t0
        metrics = [json.loads(line) for line in open(run / "metrics.jsonl")]
        res["step"] = {"wall_seconds_2_steps_incl_load": wall,
                       "steps": [{k: v for k, v in r.items() if k.startswith("perf/")} for r in metrics],
                       "peak_gb": torch.cuda.max_memory_allocated() / 2**30}
    stock = next(r for r in res["decode"] if r["engine"] == "decode/stock_dynamic")
    fast32 = next(r for r in res["decode"] if r["engine"] == "decode/fast" and r["batch"] == 32)
    res["speedup_decode_b32_vs_stock"] = stock["ms_per_step"] / fast32["ms_per_step"]
    # Projection of the whole paper recipe at maximum message lengths (a worst case: real messages stop early):
    # 6 runs x 80 steps at the measured step time, and 14 evaluations (2 base, 6 trained, 6 cross-play) of
    # 300 problems x 2 chats in batches of 128, at the measured batch-128 decode speed (1088 decode steps each).
    step_s = res["step"]["steps"][-1]["perf/seconds"]
    fast128 = next(r for r in res["decode"] if r["engine"] == "decode/fast" and r["batch"] == 128)
    eval_s = 14 * -(-600 // 128) * (1088 * fast128["ms_per_step"] / 1000)
    res["projection"] = {"train_gpu_minutes": 6 * 80 * step_s / 60, "eval_gpu_minutes_decode_only": eval_s / 60,
                         "recipe_gpu_minutes": (6 * 80 * step_s + eval_s) / 60, "seed_gpu_minutes": 567.8}
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{'what':<24}{'batch':>6}{'ms/step':>10}{'tok/s':>10}")
    for r in res["decode"]:
        print(f"{r['engine']:<24}{r['batch']:>6}{r['ms_per_step']:>10.2f}{r['tokens_per_s']:>10.0f}")
    L = res["learn"]
    print(f"learn: {L['tokens']} tokens in {L['seconds']:.2f} s = {L['tokens_per_s']:.0f} tok/s, "
          f"{L['tflops']:.0f} TFLOP/s ({100 * L['share_of_bf16_peak_989']:.0f}% of 989), peak {L['peak_gb']:.1f} GB")
    for s in res["step"]["steps"]:
        print("step:", {k: round(v, 2) for k, v in s.items()})
    print(f"decode speed-up at batch 32 vs stock: {res['speedup_decode_b32_vs_stock']:.1f}x")
    print(f"projected paper recipe: {res['projection']['recipe_gpu_minutes']:.1f} GPU-minutes (seed: 567.8)")


if __name__ == "__main__":
    main()
