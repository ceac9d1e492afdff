"""Evaluation at the paper preset's shape on one GPU: time and peak memory per `eval.batch_chats`, for an
evaluation of one model (both copies the base: one engine) and for cross-play (a trained A against the base B:
two models, two engines, each with its own sampling weights and KV cache).

A random-init model built from the real Qwen2.5-1.5B-Instruct config with the real tokenizer; messages forced to
their maximum length; the trained player is a 1-step paper-preset run (LoRA). Each evaluation is 300 problems x 2
chats, timed after a one-batch evaluation of the same pair (which compiles and captures). Writes JSON.

  python bench/gpu_eval.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out eval.json
"""

from __future__ import annotations

import argparse
import datetime
import json
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
    ap.add_argument("--batches", type=lambda x: [int(v) for v in x.split(",")], default=[128, 200, 300])
    ap.add_argument("--n-problems", type=int, default=300)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", action="append", default=[],
                    help="config override for every run, a.b=value (a CPU smoke run shortens the messages)")
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.experiment.evaluate import evaluate
    from talktosolve.experiment.train import train
    from talktosolve.task.tasks import load_problems

    cuda = args.device == "cuda"
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__, "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        config = AutoConfig.from_pretrained(args.model_dir)
        save_random_model(config, AutoTokenizer.from_pretrained(args.model_dir), f"{tmp}/model", args.device)
        base = merge_overrides({"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True},
                       "data": {"gsm8k": args.gsm8k}, "device": args.device}, parse_overrides(args.set))
        cfg = make_config("paper", merge_overrides(base, {"train": {"steps": 1}}))
        train_set, test_set, _ = load_problems(cfg, Path(tmp) / "data")
        run = Path(tmp) / "run"
        train(cfg, "chat", 0, run, train_set, progress=False)
        for pair, seat_a in (("one model", None), ("cross-play", str(run))):
            for batch_chats in args.batches:
                ev = {"batch_chats": batch_chats, "n_problems": args.n_problems}
                warm = make_config("paper", merge_overrides(base, {"eval": {**ev, "n_problems": batch_chats // 2}}))
                evaluate(warm, test_set, Path(tmp) / f"warm-{pair}-{batch_chats}", seats={"A": seat_a}, progress=False)
                if cuda:
                    torch.cuda.empty_cache()
                    torch.cuda.reset_peak_memory_stats()
                t0 = time.perf_counter()
                summary = evaluate(make_config("paper", merge_overrides(base, {"eval": ev})), test_set,
                                   Path(tmp) / f"eval-{pair}-{batch_chats}", seats={"A": seat_a}, progress=False)
                row = {"pair": pair, "batch_chats": batch_chats, "chats": summary["n_chats"],
                       "seconds": time.perf_counter() - t0,
                       "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if cuda else None}
                res["rows"].append(row)
                Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
                print(row, flush=True)
                if cuda:
                    torch.cuda.empty_cache()
    print(f"{'evaluation':<12}{'batch':>7}{'seconds':>9}{'peak GB':>9}")
    for r in res["rows"]:
        print(f"{r['pair']:<12}{r['batch_chats']:>7}{r['seconds']:>9.1f}{(r['peak_gb'] or 0):>9.1f}")


if __name__ == "__main__":
    main()
