"""Where the recipe's evaluation stage spends its time, on one GPU: its parts timed, one turn's kernels traced.

Six 1-step LoRA runs of the paper preset are trained (random-init model from the real Qwen2.5-1.5B config, real
tokenizer, messages forced to their maximum length, as `gpu_evals_together.py` does); then the recipe runs its
evaluation stage (20 evaluations, `eval.batch_evals` at a time) with timers around its parts. Each timer
synchronises the GPU, so a part is its wall time, nested parts included in their parent's (generate holds
prefill, capture, hold and place; what is left of it is decode). With `--kernels K`, engine call K (0: the
first pass's first turn; 3 its last, the longest) also runs under the profiler and its CUDA kernels are
tabled. `--set eval.n_problems=128` times a shorter stage of the same passes. Prints a table and writes JSON.

With `--weights MODEL` (a folder or a GGUF file of real weights) the runs train on real chats and the
evaluations play real ones, which stop where the model ends them; every engine call is then recorded in `calls`
as `profile_step.py` records a step's (rows, limit, decode steps, rows still writing at each tenth of them).
`--whole-batches` keeps every call's batch whole to its end (no `compaction`), the form to compare against.

    python bench/profile_eval.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out profile.json
    python bench/profile_eval.py --weights MODEL_DIR --gsm8k GSM8K_DIR --out real.json
    python bench/profile_eval.py --weights MODEL_DIR --gsm8k GSM8K_DIR --whole-batches --out whole.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import tempfile
import time
from pathlib import Path

import torch
from profile_step import COUNTS, TIMES, model_arguments, model_choice, recorded, sync, timed
from random_model import save_random_model


def main():
    ap = argparse.ArgumentParser()
    model_arguments(ap)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--together", type=int, default=6, help="eval.batch_evals (evaluations sharing engine passes)")
    ap.add_argument("--kernels", type=int, default=-1, help="engine call whose CUDA kernels are tabled (-1: none)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", action="append", default=[], help="config override, a.b=value")
    args = ap.parse_args()
    model_choice(ap, args)

    from transformers import AutoConfig, AutoTokenizer

    import talktosolve.experiment.evaluate as ev
    import talktosolve.experiment.recipe as rc
    import talktosolve.sampling.compaction as compaction
    import talktosolve.sampling.fast_engine as fe
    import talktosolve.sampling.fast_layers as fl
    import talktosolve.sampling.rollout as ro
    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.experiment.train import train_runs
    from talktosolve.task.tasks import load_problems

    cuda = args.device == "cuda"
    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": torch.cuda.get_device_name() if cuda else None, "torch": torch.__version__,
           "weights": args.weights or "random", "whole_batches": args.whole_batches, "calls": []}
    with tempfile.TemporaryDirectory() as tmp:
        if args.weights:
            model = {"model": {"name_or_path": args.weights}}
        else:
            config = AutoConfig.from_pretrained(args.model_dir)
            save_random_model(config, AutoTokenizer.from_pretrained(args.model_dir), f"{tmp}/model", args.device)
            model = {"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True}}
        over = merge_overrides({**model, "data": {"gsm8k": args.gsm8k}, "device": args.device,
                                "train": {"steps": 1, "runs_per_process": 6}, "eval": {"batch_evals": args.together}},
                               parse_overrides(args.set))
        cfg = make_config("paper", over)
        train_set, _, _ = load_problems(cfg, Path(tmp) / "data")
        train_runs(cfg, [(arm, seed, Path(tmp) / "runs" / f"{arm}-s{seed}") for arm in cfg.arms for seed in cfg.seeds],
                   train_set, progress=False)

        # The parts, patched after training so that they time the evaluation stage alone.
        ev.load_players = timed("load/models, one engine each", ev.load_players)
        ev.slot_lineups = timed("load/base and adapters, one slot engine", ev.slot_lineups)
        ev.play_chats = timed("play", ev.play_chats)
        ro._encode = timed("play/encode views", ro._encode)
        generate = fe.StaticEngine.generate
        calls = {"n": 0}

        def traced(self, *a, **k):
            i, calls["n"] = calls["n"], calls["n"] + 1
            if i != args.kernels:
                return generate(self, *a, **k)
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out = generate(self, *a, **k)
                sync()
            table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=90)
            res["kernels"] = {"call": i, "rows": len(a[0]), "new_tokens": a[1], "table": table.splitlines()}
            print(table, flush=True)
            return out

        fe.StaticEngine.generate = timed("play/generate", recorded(traced, res["calls"]))
        fe.StaticEngine._read = timed("play/generate/prefill", fe.StaticEngine._read)
        fe.StaticEngine._graph = timed("play/generate/graph lookup or capture", fe.StaticEngine._graph)
        compaction.hold = timed("play/generate/hold", compaction.hold)
        fl.place = timed("play/generate/place", fl.place)
        ev.reward.score_chats = timed("grade", ev.reward.score_chats)
        ev._write = timed("summaries and folders", ev._write)
        rc.evaluate_teams = timed("evaluations", rc.evaluate_teams)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        sync()
        t0 = time.perf_counter()
        rc.run_recipe(cfg, Path(tmp), preset="paper", progress=False)
        res["seconds"] = time.perf_counter() - t0
        res["peak_gb"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
        res["evaluations"] = len(list((Path(tmp) / "evals").glob("*/summary.json")))
    parts = dict(TIMES)
    parts["play/generate/decode (the rest)"] = parts.get("play/generate", 0.0) - sum(
        v for k, v in parts.items() if k.startswith("play/generate/"))
    parts["outside evaluations (recipe, stats, report)"] = res["seconds"] - parts["evaluations"]
    res.update(batch_evals=args.together, overrides=args.set, engine_calls=calls["n"], parts=parts,
               counts=dict(COUNTS))
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nevaluation stage: {res['evaluations']} evaluations, {res['seconds']:.1f} s, "
          f"peak {res['peak_gb'] or 0:.1f} GB, {calls['n']} engine calls")
    for k, v in sorted(parts.items()):
        print(f"  {k:<48}{v:9.2f} s  {COUNTS.get(k, '')}")


if __name__ == "__main__":
    main()
