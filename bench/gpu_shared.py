"""Several training runs in one process (`train.runs_per_process`) against one run at a time, on one GPU.

A random-init model built from the real Qwen2.5-1.5B-Instruct config (bf16) with the real tokenizer; messages
forced to their maximum lengths (160/160/384/384). Measured in one process, side by side:

  decode         ms per decode step of one run's 32 chats (the sampler's merged LoRA weights) against one step
                 of --runs runs' 32 chats each in one slot-mode engine (base weights + each row block's own
                 adapter), after prompts of 300 and 1,100 tokens
  steps          the real train loop, paper preset, --steps steps: `train` of one run, then `train_runs` of
                 --runs runs (chat and cut arms, seeds 0, 1, ...) sharing every decode step; steady state = the
                 median of the steps after the first; a shared step's time is the sum of its runs' perf/seconds
                 (the shared sampling once, each run's learning); the shared step again with every row reading
                 its whole prompt (`StaticEngine.share_prefixes` off: no run of tokens read once for a group);
                 with prefill over the left-padded block under its mask (`StaticEngine.packed_prefill` off:
                 no packed rows, no FlashAttention); with the learner reading right-padded rows
                 (`grpo.PACKED_ROWS` off: no shared run read once in learning); and with the decode attention
                 reading every row's left padding too (`StaticEngine.attend` with `read_padding=True`: the
                 kernel's form before it read each row's own columns alone)
  eval           one paper-preset evaluation (300 problems x 2 chats, the preset's batch), after a warm-up one,
                 with shared runs read once and with whole prompts
  evaluations    the recipe's evaluation stage over the --runs runs just trained (when they are the recipe's six),
                 `eval.batch_evals` --batch-evals, timed whole (report and plots included)
  projection     the paper recipe's GPU-minutes either way: one run at a time, 6 x 80 steps plus its evaluations
                 one at a time (each as `eval`); runs per process, 80 shared steps plus the evaluation stage

Prints a table and writes JSON (date, GPU, library versions). `--device cpu` with a tiny config folder and
`--set` overrides is a smoke run of the script itself.

  python bench/gpu_shared.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out shared.json
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import platform
import tempfile
import time
from pathlib import Path

import torch
from random_model import save_random_model, stand_in_rewards


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def decode_ms(engine, prompts, device, slots=0, n=384):
    """ms per decode step: (a call making n tokens - a call making 1) / (n - 1), one KV shape for both."""
    kw = {"slots": slots} if slots else {}
    cap = max(len(p) for p in prompts) + n
    gen = torch.Generator(device=device).manual_seed(0)
    engine.generate(prompts, n, gen, capacity=cap, **kw)  # compile and capture
    engine.generate(prompts, 1, gen, capacity=cap, **kw)
    times = []
    for k in (n, 1):
        sync(device)
        t = time.perf_counter()
        engine.generate(prompts, k, gen, capacity=cap, **kw)
        sync(device)
        times.append(time.perf_counter() - t)
    return 1000 * (times[0] - times[1]) / (n - 1)


def steady(metrics: list[dict], runs: int) -> dict:
    """Per step: the wall of all runs' work (sum of their perf/seconds), its sampling and learning; the median
    over the steps after the first (which compiles and captures)."""
    steps = sorted({m["step"] for m in metrics})
    rows = []
    for s in steps:
        mine = [m for m in metrics if m["step"] == s]
        assert len(mine) == runs, (s, len(mine))
        rows.append({"seconds": sum(m["perf/seconds"] for m in mine),
                     "sample_seconds": sum(m["perf/sample_seconds"] for m in mine),
                     "learn_seconds": sum(m["perf/learn_seconds"] for m in mine),
                     "peak_gb": max(m.get("perf/peak_gpu_gb") or 0 for m in mine),
                     "peak_sample_gb": max(m.get("perf/peak_sample_gb") or 0 for m in mine),
                     "peak_learn_gb": max(m.get("perf/peak_learn_gb") or 0 for m in mine)})
    later = rows[1:] or rows

    def median(key):
        values = sorted(r[key] for r in later)
        return values[len(values) // 2]
    return {"per_step": rows, "seconds": median("seconds"), "sample_seconds": median("sample_seconds"),
            "learn_seconds": median("learn_seconds"),
            **{key: max(r[key] for r in rows) for key in ("peak_gb", "peak_sample_gb", "peak_learn_gb")}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=6, help="runs sharing one process (the recipe has 6)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--batch-evals", type=int, default=6, help="eval.batch_evals of the timed evaluation stage")
    ap.add_argument("--skip-one-run", action="store_true", help="time only the shared steps (no one-run baseline)")
    ap.add_argument("--skip-whole-prompts", action="store_true", help="no shared step with whole prompts")
    ap.add_argument("--skip-masked-prefill", action="store_true", help="no shared step with the masked prefill")
    ap.add_argument("--skip-padded-rows", action="store_true", help="no shared step with the learner's padded rows")
    ap.add_argument("--skip-read-padding", action="store_true",
                    help="no shared step with the decode attention reading the rows' padding")
    ap.add_argument("--evaluations-from", default="",
                    help="with --skip-eval: take the evaluation stage's time for the projection from this "
                         "bench/gpu_evals_together.py JSON (its `together` stage), measured on the same GPU")
    ap.add_argument("--set", action="append", default=[], help="config override, a.b=value (for a smoke run)")
    args = ap.parse_args()

    import peft
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.experiment.evaluate import evaluate
    from talktosolve.experiment.recipe import run_recipe
    from talktosolve.experiment.train import train_runs
    from talktosolve.learning import grpo
    from talktosolve.model.policy import make_trainable
    from talktosolve.sampling import decode_attention
    from talktosolve.sampling.fast_engine import StaticEngine
    from talktosolve.store import read_jsonl
    from talktosolve.task.tasks import load_problems

    dev = args.device
    cuda = dev == "cuda"
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name() if cuda else None,
           "versions": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "peft": peft.__version__},
           "model": "Qwen2.5-1.5B-Instruct config, random init, bf16", "runs": args.runs}

    def save():
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    config = AutoConfig.from_pretrained(args.model_dir)
    cfg = make_config("paper")
    if not args.skip_decode:
        torch.manual_seed(0)
        with torch.device(dev):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        lora = make_trainable(model.eval(), cfg.model)
        with torch.no_grad():  # B = 0 would make every adapter the same: give each run a nonzero one
            for n, p in lora.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 1e-3)
        g = torch.Generator().manual_seed(0)
        res["decode"] = []
        for n_prompt in (300, 1100):
            prompts = [torch.randint(0, 150000, (n_prompt,), generator=g).tolist() for _ in range(32 * args.runs)]
            one = StaticEngine(lora, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True)
            single = decode_ms(one, prompts[:32], dev)
            del one
            slot = StaticEngine(lora, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True,
                                slots=args.runs)
            for j in range(args.runs):
                slot.store_adapter(j)
            alone = decode_ms(slot, prompts[:32], dev, slots=1)
            shared = decode_ms(slot, prompts, dev, slots=args.runs)
            del slot
            row = {"prompt_tokens": n_prompt, "one_run_b32_ms": single, "slot_mode_one_run_b32_ms": alone,
                   f"{args.runs}_runs_b{32 * args.runs}_ms": shared, "per_run_ms": shared / args.runs,
                   "speedup_per_run": single * args.runs / shared}
            res["decode"].append(row)
            save()
            print("decode", row, flush=True)
            if cuda:
                torch.cuda.empty_cache()
        del lora, model
        if cuda:
            torch.cuda.empty_cache()

    stand_in_rewards()  # every message trained, as if every group's chats scored differently
    with tempfile.TemporaryDirectory() as tmp:
        save_random_model(config, tok, f"{tmp}/model", dev)
        base = merge_overrides({"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                                "data": {"gsm8k": args.gsm8k}, "device": dev, "train": {"steps": args.steps}},
                               parse_overrides(args.set))
        arms = [("chat", "cut")[j % 2] for j in range(args.runs)]
        res["steps"] = {}
        # (name, runs, share_prefixes, packed_prefill, PACKED_ROWS, read_padding)
        stages = ([("one_run", 1, True, None, True, False)] * (not args.skip_one_run)
                  + [("shared", args.runs, True, None, True, False)]
                  + [("shared_whole_prompts", args.runs, False, None, True, False)] * (not args.skip_whole_prompts)
                  + [("shared_masked_prefill", args.runs, True, False, True, False)] * (not args.skip_masked_prefill)
                  + [("shared_padded_rows", args.runs, True, None, False, False)] * (not args.skip_padded_rows)
                  + [("shared_read_padding", args.runs, True, None, True, True)] * (not args.skip_read_padding))
        for name, k, share, packed, packed_rows, read_padding in stages:
            cfg = make_config("paper", merge_overrides(base, {"train": {"runs_per_process": k}}))
            train_set, test_set, _ = load_problems(cfg, Path(tmp) / "data")
            # The recipe's folder layout, so that its evaluation stage below finds the shared stage's runs done.
            runs = [(arms[j], j // 2, Path(tmp) / name / "runs" / f"{arms[j]}-s{j // 2}") for j in range(k)]
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            StaticEngine.share_prefixes, StaticEngine.packed_prefill, grpo.PACKED_ROWS = share, packed, packed_rows
            StaticEngine.attend = staticmethod(functools.partial(decode_attention.attend, read_padding=read_padding))
            t0 = time.perf_counter()
            train_runs(cfg, runs, train_set, progress=False)
            wall = time.perf_counter() - t0
            StaticEngine.share_prefixes, StaticEngine.packed_prefill, grpo.PACKED_ROWS = True, None, True
            StaticEngine.attend = staticmethod(decode_attention.attend)
            metrics = [m for *_, d in runs for m in read_jsonl(d / "metrics.jsonl")]
            row = {"runs": k, "wall_seconds_incl_load": wall, **steady(metrics, k)}
            res["steps"][name] = row
            save()
            print("steps", name, {key: v for key, v in row.items() if key != "per_step"}, flush=True)
        if not args.skip_eval:
            over = merge_overrides(base, {"train": {"steps": 1}})
            cfg = make_config("paper", over)
            warm = make_config("paper", merge_overrides(over, {"eval": {"n_problems": cfg.eval.batch_chats // 2}}))
            evaluate(warm, test_set, Path(tmp) / "eval-warm", progress=False)
            for name, share in (("eval", True), ("eval_whole_prompts", False)):
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                StaticEngine.share_prefixes = share
                t0 = time.perf_counter()
                summary = evaluate(cfg, test_set, Path(tmp) / name, progress=False)
                StaticEngine.share_prefixes = True
                res[name] = {"batch_chats": cfg.eval.batch_chats, "chats": summary["n_chats"],
                             "seconds": time.perf_counter() - t0,
                             "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
                save()
                print(name, res[name], flush=True)
            recipe = make_config("paper", merge_overrides(base, {"train": {"runs_per_process": args.runs},
                                                                 "eval": {"batch_evals": args.batch_evals}}))
            if args.runs == len(recipe.arms) * len(recipe.seeds):
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                run_recipe(recipe, Path(tmp) / "shared", preset="paper", progress=False)
                seconds = time.perf_counter() - t0
                done = list((Path(tmp) / "shared" / "evals").glob("*/summary.json"))
                res["evaluations"] = {"batch_evals": args.batch_evals, "evaluations": len(done), "seconds": seconds,
                                      "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
                save()
                print("evaluations", res["evaluations"], flush=True)
    if args.evaluations_from:
        together = next(r for r in json.loads(Path(args.evaluations_from).read_text())["stages"]
                        if r["stage"] == "together")
        res["evaluations"] = {"from": Path(args.evaluations_from).name, **{k: together[k] for k in
                              ("batch_evals", "evaluations", "seconds", "peak_gb")}}
    one, shared = res["steps"].get("one_run"), res["steps"]["shared"]
    n_evals = res["evaluations"]["evaluations"] if "evaluations" in res else 20
    alone_s = n_evals * res["eval"]["seconds"] if "eval" in res else None
    together_s = res["evaluations"]["seconds"] if "evaluations" in res else alone_s
    minutes = lambda *parts: None if None in parts else sum(parts) / 60  # noqa: E731
    res["projection"] = {
        "one_run_at_a_time_gpu_minutes": minutes(6 * 80 * one["seconds"], alone_s) if one else None,
        "shared_gpu_minutes": minutes(6 / args.runs * 80 * shared["seconds"], together_s),
        "evaluations": n_evals, "eval_one_at_a_time_gpu_minutes": minutes(alone_s),
        "eval_together_gpu_minutes": minutes(together_s), "seed_gpu_minutes": 567.8,
        "step_speedup_per_run": args.runs * one["seconds"] / shared["seconds"] if one else None,
        **{f"shared_step_{key}_over_shared_runs": res["steps"][f"shared_{key}"]["seconds"] / shared["seconds"]
           for key in ("whole_prompts", "masked_prefill", "padded_rows", "read_padding")
           if f"shared_{key}" in res["steps"]}}
    save()
    print()
    for r in res.get("decode", []):
        print(f"{'decode ms/step, prompt ' + str(r['prompt_tokens']):<34}{r['one_run_b32_ms']:>12.2f}"
              f"{r[f'{args.runs}_runs_b{32 * args.runs}_ms']:>18.2f}   ({r['speedup_per_run']:.2f}x per run; "
              f"slot mode, one run: {r['slot_mode_one_run_b32_ms']:.2f})")
    others = [(key, res["steps"][key]) for key in ("shared_whole_prompts", "shared_masked_prefill", "shared_padded_rows",
                                                   "shared_read_padding") if key in res["steps"]]
    print(f"{'':<34}{'one run':>12}{f'{args.runs} runs shared':>18}" + "".join(f"{k[7:]:>18}" for k, _ in others))
    cell = lambda r, key, width: f"{r[key]:>{width}.2f}" if r else f"{'-':>{width}}"  # noqa: E731
    for key, label in (("seconds", "step s"), ("sample_seconds", "  sampling s"), ("learn_seconds", "  learning s"),
                       ("peak_gb", "peak GB"), ("peak_sample_gb", "  sampling"), ("peak_learn_gb", "  learning")):
        print(f"{label:<34}{cell(one, key, 12)}{shared[key]:>18.2f}" + "".join(f"{r[key]:>18.2f}" for _, r in others))
    p = res["projection"]
    print(f"{'per run-step s':<34}{cell(one, 'seconds', 12)}{shared['seconds'] / args.runs:>18.2f}"
          + "".join(f"{r['seconds'] / args.runs:>18.2f}" for _, r in others))
    if "eval" in res:
        print(f"evaluation: {res['eval']['seconds']:.1f} s ({res['eval_whole_prompts']['seconds']:.1f} s with whole "
              f"prompts)")
    if "evaluations" in res:
        e = res["evaluations"]
        print(f"the recipe's {e['evaluations']} evaluations, {e['batch_evals']} at a time: {e['seconds']:.1f} s, "
              f"peak {e['peak_gb'] or 0:.1f} GB" + (f" (from {e['from']})" if "from" in e else ""))
    show = lambda v: "-" if v is None else f"{v:.1f}"  # noqa: E731
    print(f"projected paper recipe: {show(p['one_run_at_a_time_gpu_minutes'])} GPU-min one run at a time, "
          f"{show(p['shared_gpu_minutes'])} with {args.runs} runs per process (seed: 567.8)")


if __name__ == "__main__":
    main()
