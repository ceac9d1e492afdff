"""GPU benchmark of the paper preset's shape, in one process, on one GPU.

A random-init model built from the real Qwen2.5-1.5B-Instruct config (bf16, sdpa) with the real tokenizer;
message lengths are forced to their maximum (random text never stops). Measured side by side:

  decode/stock_dynamic   transformers `generate`, default dynamic cache, sampling (the baseline)
  decode/stock_static    `generate` with cache_implementation="static" (auto-compiled; both timed calls warmed up twice)
  decode/fast_eager      talktosolve's StaticEngine without torch.compile (CUDA graph decode, Gumbel-max)
  decode/fast            the same with each decode layer compiled (the default on CUDA), at batch 32 and 128,
                         after prompts of 300 and 1,100 tokens
  decode/..._portable_attention   the same without the attention kernel (`decode_attention`)
  decode/..._before_splits        the same with the attention kernel before its splits
                                  (`bench/decode_attention_before.py`)
  learn                  one GRPO update over 128 messages (8 problems x 4 chats x 4 turns) of ~600 tokens,
                         decoder layers compiled (the default on a GPU), micro-batches of the preset's token
                         budget (train.microbatch_tokens)
  learn/...              the same eager, by 2 or 4 chats per micro-batch, and with gradient checkpointing
  eval                   a whole paper-preset evaluation (300 problems x 2 chats) per --eval-batches entry
  steps                  the real `train` loop for --steps steps (default 5): 8 x 4 chats x 4 turns at
                         160/160/384/384 tokens; steady state = median of the steps after the first; once
                         per --step-settings entry (micro-batching, gradient checkpointing), with the learning
                         phase's own tokens/s (its rows are a max-length chat's views, longer than `learn`'s)

The projected GPU time of the paper recipe is 6 x 80 steady steps plus 14 evaluations as timed at the preset's
eval.batch_chats.

Prints a table and writes JSON (with date, GPU and library versions); `--decode-only` stops after the decode
rows. Usage:
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
from random_model import save_random_model, stand_in_rewards


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


def _microbatch(spec: str) -> dict:
    """`t12288` -> a token budget; `c2` (or `2`) -> chats per micro-batch (the train section's two knobs)."""
    if spec.startswith("t"):
        return {"microbatch_tokens": int(spec[1:]), "chats_per_microbatch": 2}
    return {"microbatch_tokens": 0, "chats_per_microbatch": int(spec.lstrip("c"))}


def _describe(t) -> str:
    if t.microbatch_tokens:
        return f"{t.microbatch_tokens} tokens per micro-batch"
    return f"{t.chats_per_microbatch} chats per micro-batch"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip-static", action="store_true")
    ap.add_argument("--decode-only", action="store_true", help="time the decode rows alone (and the speed-up)")
    ap.add_argument("--profile-decode", action="store_true", help="print the CUDA kernels of one decode step")
    ap.add_argument("--step-settings", type=lambda x: [(_microbatch(a), b == "ckpt") for a, b in
                                                       (part.split(":") for part in x.split(","))],
                    default=[(_microbatch("t12288"), False), (_microbatch("c2"), False)],
                    help="train-loop settings to time, as MB:ckpt|nockpt pairs, MB being tN (N padded tokens per "
                         "micro-batch) or cN (N chats per micro-batch); default t12288:nockpt,c2:nockpt")
    ap.add_argument("--eval-batches", type=lambda x: [int(v) for v in x.split(",") if v], default=[128, 300],
                    help="eval.batch_chats values to time a whole paper-preset evaluation at (default 128,300; "
                         "the projection uses the preset's)")
    ap.add_argument("--steps", type=int, default=5, help="train-loop steps to time (the first includes compiling)")
    args = ap.parse_args()

    import decode_attention_before as before
    import peft
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from talktosolve.config import make_config
    from talktosolve.learning.grpo import Sample, grpo_update
    from talktosolve.model.policy import compile_layers, enable_gradient_checkpointing, make_trainable
    from talktosolve.sampling.fast_engine import StaticEngine

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
        rows.append(("decode/stock_dynamic", b, ms, prompt_len))
        if not args.skip_static:
            try:
                # Each cache length is its own compiled graph: warm up both timed calls (twice: the second call
                # of a new shape is when the compiled graph is first replayed).
                for n in (1, n_new, 1, n_new):
                    gen(n, cache_implementation="static")()
                ms = decode_ms(gen(1, cache_implementation="static"), gen(n_new, cache_implementation="static"), n_new)
                rows.append(("decode/stock_static", b, ms, prompt_len))
            except Exception as e:  # noqa: BLE001 - record, keep benchmarking
                res["stock_static_error"] = repr(e)[:300]
    # ---- decode: the fast engine, plain model and through a LoRA adapter (refresh included); its attention
    # kernel against its portable attention, at the bench prompt and at a final turn's view length
    cfg = make_config("paper")
    lora_model = make_trainable(model, cfg.model)
    for b, compiled, kernel, n_prompt in ((32, False, True, prompt_len), (32, True, False, prompt_len),
                                          (32, True, True, prompt_len), (32, True, "before", prompt_len),
                                          (32, True, False, 1100), (32, True, True, 1100),
                                          (128, True, False, prompt_len), (128, True, True, prompt_len),
                                          (128, True, False, 1100), (128, True, True, 1100),
                                          (128, True, "before", 1100)):
        eng = StaticEngine(lora_model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True,
                           compile=compiled, attention_kernel=bool(kernel))
        if kernel == "before":
            eng.attend = before.attend
        prompts = batch(b, n_prompt)
        gen_ = torch.Generator(device="cuda").manual_seed(0)
        cap = n_prompt + 384  # one KV shape for both timed calls: the graph is captured (and compiled) once
        eng.generate(prompts, 384, gen_, capacity=cap)
        eng.generate(prompts, 1, gen_, capacity=cap)
        ms = decode_ms(lambda: eng.generate(prompts, 1, gen_, capacity=cap),
                       lambda: eng.generate(prompts, 384, gen_, capacity=cap), 384)
        name = "decode/fast" if compiled else "decode/fast_eager"
        rows.append((name + {True: "", False: "_portable_attention", "before": "_before_splits"}[kernel], b, ms,
                     n_prompt))
        t_ref, _ = cuda_time(eng.refresh)
        res[f"lora_refresh_ms_b{b}"] = 1000 * t_ref
        del eng
        torch.cuda.empty_cache()
    # 384 tokens decoded after the prompt: the cache fills from n_prompt to n_prompt + 383 columns
    res["decode"] = [{"engine": n, "batch": b, "prompt_tokens": n_prompt, "ms_per_step": ms,
                      "tokens_per_s": b * 1000 / ms} for n, b, ms, n_prompt in rows]
    stock = next(r for r in res["decode"] if r["engine"] == "decode/stock_dynamic")
    fast32 = next(r for r in res["decode"] if r["engine"] == "decode/fast" and r["batch"] == 32)
    res["speedup_decode_b32_vs_stock"] = stock["ms_per_step"] / fast32["ms_per_step"]
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print("decode:", res["decode"], flush=True)
    if args.decode_only:
        for r in res["decode"]:
            print(f"{r['engine']:<44}{r['batch']:>6}{r['prompt_tokens']:>7}{r['ms_per_step']:>10.3f}"
                  f"{r['tokens_per_s']:>10.0f}")
        print(f"decode speed-up at batch 32 vs stock: {res['speedup_decode_b32_vs_stock']:.1f}x")
        return
    # ---- decode: where a step's time goes (one eager step of the compiled layers, under the profiler)
    if args.profile_decode:
        from torch.profiler import ProfilerActivity, profile

        eng = StaticEngine(lora_model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True)
        prompts = batch(32)
        eng.generate(prompts, 8, torch.Generator(device="cuda").manual_seed(0), capacity=prompt_len + 384)
        s_ = eng.graphs[next(iter(eng.graphs))]
        for _ in range(3):
            eng._decode_step(s_)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            eng._decode_step(s_)
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=70)
        print(table, flush=True)
        res["decode_profile_top"] = table.splitlines()[:32]
        del eng
        torch.cuda.empty_cache()
    # ---- learning: one GRPO update over 128 messages of ~600 tokens (LoRA r=32), as the preset runs it
    # (its token budget per micro-batch) and with its options: by chats, gradient checkpointing.
    lens = torch.randint(450, 650, (128,), generator=g).tolist()
    samples = [Sample(batch(1, n - 150)[0], batch(1, 150)[0], (i % 4 - 1.5) / 4, i // 4) for i, n in enumerate(lens)]
    n_tok = sum(lens)
    res["learn_variants"] = []
    hf_model = lora_model.get_base_model()
    compiled_yet = False
    preset = f"t{cfg.train.microbatch_tokens}"
    variants = [("learn/eager", preset, False, False), ("learn", preset, False, True),
                ("learn/2_chats_per_microbatch", "c2", False, True), ("learn/4_chats_per_microbatch", "c4", False, True),
                ("learn/gradient_checkpointing_32768_tokens", "t32768", True, True)]
    for name, spec, ckpt, compiled in variants:
        mb = _microbatch(spec)
        if compiled and not compiled_yet:  # compiling is in place and for good: eager variants come first
            compiled_yet = compile_layers(lora_model, cfg.model, torch.device("cuda"), static_sampler=True)
        if ckpt:
            enable_gradient_checkpointing(hf_model)
        opt = torch.optim.AdamW([p for p in lora_model.parameters() if p.requires_grad], lr=1e-4)
        # warm-up over the same batch: compiles, and meets every shape the timed call will
        grpo_update(lora_model, opt, samples, pad_id=tok.pad_token_id, grad_clip=1.0, device="cuda", **mb)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base_gb = torch.cuda.memory_allocated() / 2**30
        t_learn, _ = cuda_time(lambda: grpo_update(lora_model, opt, samples, pad_id=tok.pad_token_id,
                                                   grad_clip=1.0, device="cuda", **mb))
        if ckpt:
            hf_model.gradient_checkpointing_disable()
        flops = 4 * n_params * n_tok  # forward 2N + input-gradient backward 2N per token (LoRA grads negligible)
        row = {"variant": name, "microbatch": spec, "gradient_checkpointing": ckpt, "compiled": compiled,
               "seconds": t_learn,
               "tokens": n_tok, "tokens_per_s": n_tok / t_learn, "tflops": flops / t_learn / 1e12,
               "share_of_bf16_peak_989": flops / t_learn / 989e12,
               "peak_gb": torch.cuda.max_memory_allocated() / 2**30, "resident_before_gb": base_gb}
        res["learn_variants"].append(row)
        print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    res["learn"] = next(r for r in res["learn_variants"] if r["variant"] == "learn")
    lora_model = model = opt = hf_model = None  # free the GPU for the train loop
    torch.cuda.empty_cache()
    # ---- the real train loop at maximum message lengths: the paper preset's memory settings, and the
    # alternative (gradient checkpointing with larger micro-batches; neither changes the update)
    from talktosolve.experiment.train import train
    from talktosolve.task.tasks import load_problems

    stand_in_rewards()  # every message trained, as if every group's chats scored differently
    res["steps"], res["eval"] = [], []
    with tempfile.TemporaryDirectory() as tmp:
        save_random_model(config, tok, f"{tmp}/model", "cuda")
        # ---- evaluation as the recipe runs it: 300 held-out problems x 2 chats at maximum lengths, after a
        # one-batch evaluation that compiles and captures (the recipe's evaluations run in one process)
        from talktosolve.experiment.evaluate import evaluate

        for batch_chats in args.eval_batches:
            over = {"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                    "data": {"gsm8k": args.gsm8k}, "eval": {"batch_chats": batch_chats}}
            cfg = make_config("paper", over)
            _, test_set, _ = load_problems(cfg, Path(tmp) / "data")
            warm = make_config("paper", {**over, "eval": {"batch_chats": batch_chats, "n_problems": batch_chats // 2}})
            evaluate(warm, test_set, Path(tmp) / f"eval-warm-{batch_chats}", progress=False)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            summary = evaluate(cfg, test_set, Path(tmp) / f"eval-{batch_chats}", progress=False)
            row = {"batch_chats": batch_chats, "chats": summary["n_chats"], "seconds": time.perf_counter() - t0,
                   "peak_gb": torch.cuda.max_memory_allocated() / 2**30}
            res["eval"].append(row)
            Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
            print("eval", row, flush=True)
        # Projection of the whole paper recipe at maximum message lengths (a worst case: real messages stop early):
        # 6 runs x 80 steps at the measured step time, and 14 evaluations (2 base, 6 trained, 6 cross-play) as
        # timed above at the preset's batch of chats, all of one model (cross-play's second model and engine cost a
        # little more: bench/gpu_eval.py times both).
        preset_eval = next((r for r in res["eval"] if r["batch_chats"] == make_config("paper").eval.batch_chats),
                           res["eval"][0] if res["eval"] else None)
        eval_s = 14 * preset_eval["seconds"] if preset_eval else float("nan")
        for mb, ckpt in args.step_settings:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            cfg = make_config("paper", {"model": {"name_or_path": f"{tmp}/model", "gradient_checkpointing": ckpt},
                                        "chat": {"force_max_length": True}, "data": {"gsm8k": args.gsm8k},
                                        "train": {"steps": args.steps, **mb}})
            train_set, _, _ = load_problems(cfg, Path(tmp) / "data")
            run = Path(tmp) / f"run-{len(res['steps'])}"
            t0 = time.perf_counter()
            train(cfg, "chat", 0, run, train_set, progress=False)
            wall = time.perf_counter() - t0
            metrics = [json.loads(line) for line in open(run / "metrics.jsonl")]
            # Steady state: the median of the steps after the first (which captures graphs and compiles).
            later = sorted(r["perf/seconds"] for r in metrics[1:]) or [metrics[0]["perf/seconds"]]
            step_s = later[len(later) // 2]
            steady = metrics[1:] or metrics

            def median(key):
                values = sorted(r[key] for r in steady)
                return values[len(values) // 2]
            # The learning phase inside the real step: tokens its forward passes read per second (prompts and
            # completions; the synthetic `learn` rows above are shorter than a max-length chat's views).
            learn_tps = median("perf/learn_row_tokens") / median("perf/learn_seconds")
            row = {"microbatch": _describe(cfg.train), "microbatch_tokens": cfg.train.microbatch_tokens,
                   "chats_per_microbatch": cfg.train.chats_per_microbatch, "gradient_checkpointing": ckpt,
                   "wall_seconds_incl_load": wall,
                   "steps": [{k: v for k, v in r.items() if k.startswith("perf/")} for r in metrics],
                   "steady_seconds": step_s, "peak_gb": torch.cuda.max_memory_allocated() / 2**30,
                   "sample_seconds": median("perf/sample_seconds"), "learn_seconds": median("perf/learn_seconds"),
                   "learn_row_tokens": median("perf/learn_row_tokens"), "learn_row_tokens_per_s": learn_tps,
                   "learn_share_of_bf16_peak_989": 4 * n_params * learn_tps / 989e12,
                   "projection": {"train_gpu_minutes": 6 * 80 * step_s / 60,
                                  "eval_gpu_minutes": eval_s / 60,
                                  "recipe_gpu_minutes": (6 * 80 * step_s + eval_s) / 60, "seed_gpu_minutes": 567.8}}
            res["steps"].append(row)
            Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
            print("step", {k: v for k, v in row.items() if k != "steps"}, flush=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{'what':<44}{'batch':>6}{'prompt':>7}{'ms/step':>10}{'tok/s':>10}")
    for r in res["decode"]:
        print(f"{r['engine']:<44}{r['batch']:>6}{r['prompt_tokens']:>7}{r['ms_per_step']:>10.2f}"
              f"{r['tokens_per_s']:>10.0f}")
    for r in res["eval"]:
        print(f"evaluation, {r['chats']} chats in batches of {r['batch_chats']}: {r['seconds']:.1f} s, "
              f"peak {r['peak_gb']:.1f} GB")
    for L in res["learn_variants"]:
        print(f"{L['variant']}: {L['tokens']} tokens in {L['seconds']:.2f} s = {L['tokens_per_s']:.0f} tok/s, "
              f"{L['tflops']:.0f} TFLOP/s ({100 * L['share_of_bf16_peak_989']:.0f}% of 989), "
              f"peak {L['peak_gb']:.1f} GB")
    print(f"decode speed-up at batch 32 vs stock: {res['speedup_decode_b32_vs_stock']:.1f}x")
    for r in res["steps"]:
        print(f"step, {r['microbatch']}, gradient checkpointing "
              f"{r['gradient_checkpointing']}: steady {r['steady_seconds']:.2f} s (sampling {r['sample_seconds']:.2f} s, "
              f"learning {r['learn_seconds']:.2f} s = {r['learn_row_tokens_per_s']:.0f} tok/s), peak {r['peak_gb']:.1f} GB, "
              f"projected paper recipe {r['projection']['recipe_gpu_minutes']:.1f} GPU-minutes (seed: 567.8)")


if __name__ == "__main__":
    main()
