"""The recipe's evaluations one at a time against played together (`eval.batch_evals`), on one GPU, in one run.

The paper preset's 20 evaluations (two untrained pairs, six trained pairs, six cross-plays each way) of six 1-step LoRA
runs, on a random-init model built from the real Qwen2.5-1.5B-Instruct config with the real tokenizer, messages
forced to their maximum length. The runs are trained once; then the recipe runs its evaluation stage twice over
copies of them: with `eval.batch_evals=1` (each evaluation with its own engines, as today) and with
`eval.batch_evals=N` (up to N evaluations in the same passes of one slot-mode engine). Each stage is timed whole,
model loading, capture and report included; peak memory per stage. `--read-padding-too` plays the together stage
also with the decode attention reading every row's left padding (`StaticEngine.attend` with `read_padding=True`: the
kernel's form before it read each row's own columns alone), once before it (which compiles and captures for both forms, so
neither compared stage pays for it) and once after; the ratio is taken between the two stages after the first.
Prints a table and writes JSON.

  python bench/gpu_evals_together.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out X.json
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from random_model import save_random_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--together", type=int, default=6,
                    help="eval.batch_evals of the second stage (a pass holds this many x eval.batch_chats chats)")
    ap.add_argument("--skip-alone", action="store_true",
                    help="time only the stage played together (no one-at-a-time baseline, no equality check)")
    ap.add_argument("--read-padding-too", action="store_true",
                    help="also play together with the attention reading the rows' padding (the old form), before "
                         "and after")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", action="append", default=[],
                    help="config override for every stage, a.b=value (a CPU smoke run shortens the messages)")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.experiment.recipe import run_recipe
    from talktosolve.experiment.train import train_runs
    from talktosolve.sampling import decode_attention
    from talktosolve.sampling.fast_engine import StaticEngine
    from talktosolve.store import read_json
    from talktosolve.task.tasks import load_problems

    cuda = args.device == "cuda"
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__, "stages": []}
    with tempfile.TemporaryDirectory() as tmp:
        config = AutoConfig.from_pretrained(args.model_dir)
        save_random_model(config, AutoTokenizer.from_pretrained(args.model_dir), f"{tmp}/model", args.device)
        base = merge_overrides({"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                                "data": {"gsm8k": args.gsm8k}, "device": args.device,
                                "train": {"steps": 1, "runs_per_process": 6}}, parse_overrides(args.set))
        cfg = make_config("paper", base)
        train_set, _, _ = load_problems(cfg, Path(tmp) / "data")
        first = Path(tmp) / "alone"
        t0 = time.perf_counter()
        train_runs(cfg, [(arm, seed, first / "runs" / f"{arm}-s{seed}") for arm in cfg.arms for seed in cfg.seeds],
                   train_set, progress=False)
        res["train_seconds"] = time.perf_counter() - t0
        stages = ([("alone", 1)] * (not args.skip_alone)
                  + [("together_read_padding_warm_up", args.together)] * args.read_padding_too
                  + [("together", args.together)] + [("together_read_padding", args.together)] * args.read_padding_too)
        for name, _ in stages:  # the runs were trained into the alone stage's folder
            if name != "alone":
                shutil.copytree(first / "runs", Path(tmp) / name / "runs")
        for name, n in stages:
            read_padding = name.startswith("together_read_padding")
            StaticEngine.attend = staticmethod(functools.partial(decode_attention.attend, read_padding=read_padding))
            if cuda:
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            run_recipe(make_config("paper", merge_overrides(base, {"eval": {"batch_evals": n}})), Path(tmp) / name,
                       preset="paper", progress=False)
            seconds = time.perf_counter() - t0
            StaticEngine.attend = staticmethod(decode_attention.attend)
            evals = sorted(p.parent.name for p in (Path(tmp) / name / "evals").glob("*/summary.json"))
            keys = {e: read_json(Path(tmp) / name / "evals" / e / "summary.json")["key"] for e in evals}
            row = {"stage": name, "batch_evals": n, "evaluations": len(evals), "seconds": seconds,
                   "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None, "keys": keys}
            res["stages"].append(row)
            print({k: v for k, v in row.items() if k != "keys"}, flush=True)
        if not args.skip_alone:
            alone, together = (next(r for r in res["stages"] if r["stage"] == s) for s in ("alone", "together"))
            res["same_evaluations"] = alone["keys"] == together["keys"]
            res["speedup"] = alone["seconds"] / together["seconds"]
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{'evaluations':<34}{'batch_evals':>12}{'seconds':>9}{'peak GB':>9}")
    for r in res["stages"]:
        print(f"{r['evaluations']:>3} {r['stage']:<30}{r['batch_evals']:>12}{r['seconds']:>9.1f}"
              f"{(r['peak_gb'] or 0):>9.1f}")
    if args.read_padding_too:
        together, old = (next(r for r in res["stages"] if r["stage"] == s)
                         for s in ("together", "together_read_padding"))
        res["read_padding_over_own_columns"] = old["seconds"] / together["seconds"]
        Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
        print(f"reading the padding / each row's own columns: {res['read_padding_over_own_columns']:.3f}")
    if "speedup" in res:
        print(f"together / alone: {1 / res['speedup']:.3f} (same evaluations: {res['same_evaluations']})")


if __name__ == "__main__":
    main()
