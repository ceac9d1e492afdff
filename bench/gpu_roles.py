"""Per-role adapters and a base-partner mixture against today's shared-adapter step, on one GPU, in one process.

A random-init model built from the real Qwen2.5-1.5B-Instruct config (bf16) with the real tokenizer; messages
forced to their maximum lengths (160/160/384/384); the paper preset otherwise (8 problems x 4 chats, LoRA r=32,
train.microbatch_tokens). The real train loop, --steps steps of each setting, in this order:

  shared              today's step: one adapter plays every seat, self-play
  per_role            one adapter per seat (model.adapters=per_role): a model copy, engine and optimizer each
  per_role+partners   per-role, with half of each step's problems seating the frozen base (train.partners=0.5)
  partners            the shared adapter with the same mixture

Steady state = the median of each setting's steps after the first (which compiles and captures graphs); peak =
the largest perf/peak_gpu_gb of its steps. Every message is trained (`random_model.stand_in_rewards`), the
learner's worst case. Ratios are against `shared` in the same process. Prints a table and writes JSON.

  python bench/gpu_roles.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out roles.json

`--device cpu --set train.problems_per_step=2 ...` with a small config folder is a smoke run of the script.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from random_model import run_facts, save_random_model, stand_in_rewards

SETTINGS = {
    "shared": {},
    "per_role": {"model": {"adapters": "per_role"}},
    "per_role+partners": {"model": {"adapters": "per_role"}, "train": {"partners": 0.5}},
    "partners": {"train": {"partners": 0.5}},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", action="append", default=[], help="extra SECTION.FIELD=VALUE config overrides")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.experiment.train import train
    from talktosolve.task.tasks import load_problems

    gpu = args.device == "cuda"
    res = {**run_facts(args.device), "steps_per_setting": args.steps, "settings": []}
    stand_in_rewards()
    config = AutoConfig.from_pretrained(args.model_dir)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        save_random_model(config, tok, f"{tmp}/model", args.device)
        base = {"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                "data": {"gsm8k": args.gsm8k}, "train": {"steps": args.steps}, "device": args.device}
        base = merge_overrides(base, parse_overrides(args.set))
        for name in args.settings.split(","):
            if gpu:
                torch.cuda.empty_cache()
            cfg = make_config("paper", merge_overrides(base, SETTINGS[name]))
            train_set, _, _ = load_problems(cfg, Path(tmp) / "data")
            run = Path(tmp) / f"run-{name}"
            t0 = time.perf_counter()
            train(cfg, "chat", 0, run, train_set, progress=False)
            wall = time.perf_counter() - t0
            rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
            later = rows[1:] or rows

            def median(key):
                values = sorted(r[key] for r in later)
                return values[len(values) // 2]

            row = {"setting": name, "overrides": SETTINGS[name], "wall_seconds_incl_load": wall,
                   "steady_seconds": median("perf/seconds"), "sample_seconds": median("perf/sample_seconds"),
                   "learn_seconds": median("perf/learn_seconds"), "tokens": median("perf/tokens"),
                   "peak_gb": max(r["perf/peak_gpu_gb"] for r in rows) if gpu else None,
                   "steps": [{k: v for k, v in r.items() if k.startswith("perf/")} for r in rows]}
            res["settings"].append(row)
            Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
            print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items() if k != "steps"},
                  flush=True)
    ref = next((r for r in res["settings"] if r["setting"] == "shared"), None)
    if ref is not None:
        for row in res["settings"]:
            row["step_vs_shared"] = row["steady_seconds"] / ref["steady_seconds"]
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"\n{'setting':<20} {'step s':>8} {'sample s':>9} {'learn s':>8} {'x shared':>9} {'peak GB':>8}")
    for row in res["settings"]:
        peak = f"{row['peak_gb']:.1f}" if row["peak_gb"] is not None else "-"
        print(f"{row['setting']:<20} {row['steady_seconds']:>8.2f} {row['sample_seconds']:>9.2f} "
              f"{row['learn_seconds']:>8.2f} {row.get('step_vs_shared', float('nan')):>9.2f} {peak:>8}")


if __name__ == "__main__":
    main()
