"""The paper preset on a smaller card: its train step's and evaluation's peak memory and time under the default
settings and under smaller memory knobs, on one GPU, in one process.

A random-init model built from the real Qwen2.5-1.5B-Instruct config (bf16) with the real tokenizer; messages
forced to their maximum lengths (160/160/384/384); every message trained (`random_model.stand_in_rewards`). For
each setting (`--settings`: `name=microbatch_tokens/batch_chats`, `/release` for train.release_sampler,
comma-separated):

  step   the real train loop, --steps steps (steady = median of the steps after the first; peak = the largest
         perf/peak_gpu_gb: sampling and learning)
  eval   cross-play (the run just trained in seat A, the untrained base in seat B: two models and two engines, the
         evaluation that holds the most), --eval-problems held-out problems x 2 chats at the setting's
         eval.batch_chats, after a warm-up one that compiles and captures (peak = max_memory_allocated)

Ratios are against the first setting in the same process. Prints a table and writes JSON.

  python bench/gpu_memory.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out memory.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from random_model import run_facts, save_random_model, stand_in_rewards


def _settings(text: str) -> list[tuple[str, int, int, bool]]:
    out = []
    for item in text.split(","):
        name, values = item.split("=")
        tokens, chats, *release = values.split("/")
        out.append((name, int(tokens), int(chats), release == ["release"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--eval-problems", type=int, default=300)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script (no peaks)")
    ap.add_argument("--set", action="append", default=[], help="extra SECTION.FIELD=VALUE overrides (smoke runs)")
    ap.add_argument("--settings", type=_settings, default=_settings("default=12288/128,24gb=6144/64,16gb=4096/32"),
                    help="name=train.microbatch_tokens/eval.batch_chats[/release], comma-separated")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.experiment.evaluate import evaluate
    from talktosolve.experiment.train import train
    from talktosolve.task.tasks import load_problems

    res = {**run_facts(args.device), "steps": args.steps, "eval_problems": args.eval_problems, "settings": []}
    stand_in_rewards()
    config = AutoConfig.from_pretrained(args.model_dir)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        save_random_model(config, tok, f"{tmp}/model", args.device)
        gpu = args.device == "cuda"
        peak = (lambda rows, key: max(r[key] for r in rows)) if gpu else (lambda rows, key: None)
        for name, tokens, chats, release in args.settings:
            over = {"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                    "data": {"gsm8k": args.gsm8k},
                    "train": {"steps": args.steps, "microbatch_tokens": tokens, "release_sampler": release},
                    "eval": {"batch_chats": chats, "n_problems": args.eval_problems}, "device": args.device}
            over = merge_overrides(over, parse_overrides(args.set))
            cfg = make_config("paper", over)
            train_set, test_set, _ = load_problems(cfg, Path(tmp) / "data")
            run = Path(tmp) / f"run-{name}"
            if gpu:
                torch.cuda.empty_cache()
            train(cfg, "chat", 0, run, train_set, progress=False)
            rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
            later = sorted(rows[1:] or rows, key=lambda r: r["perf/seconds"])
            steady = later[len(later) // 2]
            warm = make_config("paper", merge_overrides(over, {"eval": {"n_problems": max(1, chats // 2)}}))
            evaluate(warm, test_set, Path(tmp) / f"warm-{name}", seats={"A": str(run)}, progress=False)
            if gpu:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            evaluate(cfg, test_set, Path(tmp) / f"eval-{name}", seats={"A": str(run)}, progress=False)
            eval_s = time.perf_counter() - t0
            row = {"setting": name, "microbatch_tokens": tokens, "batch_chats": chats, "release_sampler": release,
                   "step_seconds": steady["perf/seconds"], "sample_seconds": steady["perf/sample_seconds"],
                   "learn_seconds": steady["perf/learn_seconds"],
                   "step_peak_gb": peak(rows, "perf/peak_gpu_gb"), "sample_peak_gb": peak(rows, "perf/peak_sample_gb"),
                   "learn_peak_gb": peak(rows, "perf/peak_learn_gb"), "eval_seconds": eval_s,
                   "eval_peak_gb": torch.cuda.max_memory_allocated() / 2**30 if gpu else None,
                   "steps": [{k: v for k, v in r.items() if k.startswith("perf/")} for r in rows]}
            res["settings"].append(row)
            Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
            print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items() if k != "steps"},
                  flush=True)
    ref = res["settings"][0]
    for row in res["settings"]:
        row["step_vs_first"] = row["step_seconds"] / ref["step_seconds"]
        row["eval_vs_first"] = row["eval_seconds"] / ref["eval_seconds"]
        row["peak_gb"] = max(row["step_peak_gb"], row["eval_peak_gb"]) if row["eval_peak_gb"] is not None else None
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"\n{'setting':<10} {'tokens':>7} {'chats':>6} {'step s':>7} {'x':>5} {'step GB':>8} {'eval s':>7} {'x':>5} "
          f"{'eval GB':>8}")
    for r in res["settings"]:
        print(f"{r['setting']:<10} {r['microbatch_tokens']:>7} {r['batch_chats']:>6} {r['step_seconds']:>7.2f} "
              f"{r['step_vs_first']:>5.2f} {r['step_peak_gb'] or 0:>8.1f} {r['eval_seconds']:>7.1f} "
              f"{r['eval_vs_first']:>5.2f} {r['eval_peak_gb'] or 0:>8.1f}")


if __name__ == "__main__":
    main()
