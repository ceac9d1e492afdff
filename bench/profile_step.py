"""Where a paper-preset train step's time and memory go, on one GPU, and what the learner's micro-batching costs.

Runs the real `train` loop (random-init model of the given config, forced maximum message lengths) with timers
around its parts (each timer synchronises the GPU, so the parts add up to the step), then, at the last step, with
the sampler still resident (as in a real step), times the same update over the step's real samples under several
micro-batch settings, each with its peak memory. With `--runs N`, N runs share the process
(`train.runs_per_process`, the chat and cut arms in turn, as in the recipe): a step's parts are those of one
shared step, every run's learning included. Prints a table and writes JSON.

With `--weights MODEL` (a folder or a GGUF file of real weights) the step plays real chats, which stop where
the model ends its messages; the stand-in rewards stay (every message is trained). Every sampling call is then
recorded in `calls`: its rows, its limit, its decode steps (its longest row's tokens; on a GPU the engine looks
for the end every 16 steps, so it may have run up to 15 more), and how many of its rows were still writing at
each tenth of those steps (a row writes until its stop token; the static batch runs to its slowest row): the
measure of what a batch that does not wait for its slowest row would save.

    python bench/profile_step.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out profile.json
    python bench/profile_step.py --weights coder-1.5b.gguf --gsm8k GSM8K_DIR --runs 6 --out real.json
    python bench/profile_step.py --weights coder-1.5b.gguf --gsm8k GSM8K_DIR --runs 6 --whole-batches --out whole.json

`--whole-batches` keeps every call's batch whole to its end (no `compaction`): the form to compare against.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import functools
import json
import tempfile
import time
from pathlib import Path

import torch
from random_model import save_random_model, stand_in_rewards

TIMES: dict[str, float] = collections.defaultdict(float)
COUNTS: dict[str, int] = collections.defaultdict(int)


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(name, fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        sync()
        t = time.perf_counter()
        out = fn(*a, **k)
        sync()
        TIMES[name] += time.perf_counter() - t
        COUNTS[name] += 1
        return out
    return wrapper


CALLS: list[dict] = []


def recorded(generate, calls: list):
    """`StaticEngine.generate`, recording each call's rows, limit and decode steps, and how many of its rows were
    still writing at each tenth of those steps (the static batch decodes until its slowest row ends)."""
    @functools.wraps(generate)
    def wrapper(engine, prompts, max_new_tokens, *a, **k):
        rows = generate(engine, prompts, max_new_tokens, *a, **k)
        lengths = [len(r) for r in rows]
        steps = max(lengths, default=0)
        tenths = [min(steps - 1, steps * j // 10) for j in range(10)] if steps else []
        calls.append({"rows": len(rows), "limit": max_new_tokens, "decode_steps": steps,
                      "writing_by_tenth": [sum(n > i for n in lengths) for i in tenths],
                      "row_share": sum(lengths) / (len(rows) * steps) if steps else 0.0})
        return rows
    return wrapper


def replanned_microbatches(rows, max_tokens):
    """`learn_packing.microbatches` as it was before `prefixes.Stretches`: the growing batch planned anew (its
    packed `length`) for each row added. The same micro-batches; the baseline of the `r` variants."""
    from talktosolve.learning import learn_packing

    out, batch = [], []
    for row in sorted(rows, key=lambda r: r.ids):
        if batch and learn_packing.length(batch + [row]) > max_tokens:
            out.append(batch)
            batch = []
        batch.append(row)
    return out + ([batch] if batch else [])


def model_arguments(ap) -> None:
    """The model a profile runs on: random weights of a real config, or real weights; and whether calls keep their
    batches whole (the form before `compaction`)."""
    ap.add_argument("--model-dir", help="a config and tokenizer for the random-init model (not with --weights)")
    ap.add_argument("--weights", default="", help="real weights (a model folder or a GGUF file) instead of random "
                                                  "ones: messages stop where the model ends them")
    ap.add_argument("--whole-batches", action="store_true",
                    help="never move a call's rows into a smaller batch (`compaction`): the form before it")


def model_choice(ap, args) -> None:
    """Refuse both or neither of --model-dir and --weights; with --whole-batches, no call's rows ever move."""
    if bool(args.model_dir) == bool(args.weights):
        ap.error("give --model-dir (random weights of a real config) or --weights (real weights), one of the two")
    if args.whole_batches:
        import talktosolve.sampling.compaction as compaction

        compaction.bucket = lambda *a: None


def main():
    ap = argparse.ArgumentParser()
    model_arguments(ap)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--variants", default="c2,c4,t16384,t24576,t32768",
                    help="learner settings timed on the last step's samples: cN (N chats per micro-batch) or "
                         "tN (N tokens per micro-batch); a `k` suffix adds gradient checkpointing, an `x` "
                         "suffix runs the output layer as checkpointed chunks (the form before logprobs.ChosenLogprobs), "
                         "a `p` suffix reads right-padded rows (the form before learn_packing), an `s` suffix copies "
                         "micro-batches from pageable memory (a stream sync each, the form before learn_packing.upload), an `r` "
                         "suffix plans packed micro-batches by planning the growing batch anew for each row (the "
                         "form before prefixes.Stretches), an `e` suffix runs the output layer's softmax in eager passes (the form "
                         "before logprobs.FUSED_HEAD)")
    ap.add_argument("--runs", type=int, default=1,
                    help="runs in one process (`train.runs_per_process`, seeds 0, 1, ...): the parts of a shared step, "
                         "summed over its runs; no learner settings are timed")
    ap.add_argument("--layers", type=int, default=0, help="build the model with this many layers (a CPU smoke run)")
    ap.add_argument("--set", action="append", default=[], help="config override for the train loop, a.b=value")
    args = ap.parse_args()
    model_choice(ap, args)

    from transformers import AutoConfig, AutoTokenizer

    import talktosolve.experiment.step as st
    import talktosolve.experiment.train as tr
    import talktosolve.learning.grpo as grpo
    import talktosolve.learning.learn_packing as learn_packing
    import talktosolve.learning.logprobs as logprobs
    import talktosolve.sampling.fast_engine as fe
    import talktosolve.sampling.fast_layers as fl
    import talktosolve.sampling.rollout as ro
    import talktosolve.team.reward as rw
    from talktosolve.config import make_config, merge_overrides, parse_overrides
    from talktosolve.learning.grpo import grpo_update
    from talktosolve.task.tasks import load_problems

    stand_in_rewards()  # every message trained, as if every group's chats scored differently
    import talktosolve.sampling.compaction as compaction

    # The parts of a step, each timed on its own (nested timers: generate holds prefill, capture, refresh...).
    ro._encode = timed("sample/encode_views", ro._encode)
    rw.score_chats = timed("grade", rw.score_chats)
    fe.StaticEngine.generate = timed("sample/generate", recorded(fe.StaticEngine.generate, CALLS))
    fe.StaticEngine._read = timed("sample/generate/prefill", fe.StaticEngine._read)
    fe.StaticEngine._prefill_runs = timed("sample/generate/prefill/shared_runs", fe.StaticEngine._prefill_runs)
    fe.StaticEngine._graph = timed("sample/generate/graph_lookup_or_capture", fe.StaticEngine._graph)
    fe.StaticEngine.refresh = timed("sample/generate/refresh", fe.StaticEngine.refresh)
    compaction.hold = timed("sample/generate/hold", compaction.hold)
    compaction.move = timed("sample/generate/move", compaction.move)  # holds the capture of the state moved into
    fl.place = timed("sample/generate/place", fl.place)
    st.play_chats = timed("sample", st.play_chats)
    st.step_metrics = timed("metrics", st.step_metrics)
    st.append_jsonl = timed("write_logs", st.append_jsonl)
    st.checkpoint.save = timed("checkpoint", st.checkpoint.save)

    res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "steps": [], "variants": []}
    state = {"step": 0}

    def variant(spec):
        n = int(spec[1:].rstrip("kxpsre"))
        suffix = spec[1 + len(str(n)):]
        return ({"chats_per_microbatch": n if spec[0] == "c" else 2, "microbatch_tokens": n if spec[0] == "t" else 0},
                "k" in suffix, "x" in suffix, "p" in suffix, "s" in suffix, "r" in suffix, "e" in suffix)

    def learn(model, optimizer, samples, **kw):
        out = timed("learn", grpo_update)(model, optimizer, samples, **kw)
        state["step"] += 1
        if state["step"] < args.steps or args.runs > 1:
            return out
        # Last step: the same samples under each setting, the sampler's memory still held.
        res["rows"] = {"samples": len(samples), "row_tokens": out.row_tokens, "padded_tokens": out.padded_tokens,
                       "microbatches": out.microbatches}
        hf = model.get_base_model()
        for spec in filter(None, args.variants.split(",")):  # --variants "": none
            opts, ckpt, old_head, padded, pageable, replanned, eager_head = variant(spec)
            if ckpt:
                from talktosolve.model.policy import enable_gradient_checkpointing
                enable_gradient_checkpointing(hf)
            frozen_linear = logprobs._frozen_linear
            if old_head:  # the output layer as checkpointed chunks, the form `logprobs.ChosenLogprobs` replaced
                logprobs._frozen_linear = lambda head: False
            grpo.PACKED_ROWS = not padded
            logprobs.FUSED_HEAD = not eager_head
            upload = learn_packing.upload
            if pageable:  # the copy before pinned memory: from pageable memory, which synchronises the stream
                learn_packing.upload = lambda t, device: t.to(device)
            microbatches = learn_packing.microbatches
            if replanned:
                learn_packing.microbatches = replanned_microbatches
            kw2 = {**kw, **opts}
            rows = grpo.to_sequences([x for x in samples if x.advantage != 0])
            began = time.perf_counter()
            learn_packing.microbatches(rows, opts["microbatch_tokens"] or 12288)
            plan_s = time.perf_counter() - began
            grpo_update(model, optimizer, samples, **kw2)  # meets the shapes once
            sync()
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            st = grpo_update(model, optimizer, samples, **kw2)
            sync()
            dt = time.perf_counter() - t
            row = {"variant": spec, **opts, "gradient_checkpointing": ckpt, "checkpointed_output_layer": old_head,
                   "packed_rows": grpo.packs_rows(model, "cuda" if torch.cuda.is_available() else "cpu"),
                   "pinned_copies": not pageable, "replanned_microbatches": replanned,
                   "fused_head_softmax": not eager_head,
                   "plan_s": plan_s,
                   "seconds": dt,
                   "row_tokens_per_s": st.row_tokens / dt, "padded_tokens": st.padded_tokens,
                   "microbatches": st.microbatches,
                   "peak_gb": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0}
            if ckpt:
                hf.gradient_checkpointing_disable()
            logprobs._frozen_linear = frozen_linear
            grpo.PACKED_ROWS = True
            logprobs.FUSED_HEAD = True
            learn_packing.upload = upload
            learn_packing.microbatches = microbatches
            res["variants"].append(row)
            print("learn variant", {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)
        # Wall time against kernel time for the step's own setting: how launch-bound is the learner? (The update
        # ends in a device sync, so there is no separate host-issue time to read.)
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t = time.perf_counter()
            grpo_update(model, optimizer, samples, **kw)
            sync()
            wall = time.perf_counter() - t
        # The kernels' own events, as the profiler's table totals them (an op's self device time repeats its
        # kernels' and would count them twice).
        kernels = sum(e.self_device_time_total for e in prof.key_averages()
                      if e.device_type == DeviceType.CUDA and not e.is_user_annotation) / 1e6
        res["learn_profile"] = {"wall_s": wall, "kernel_time_s": kernels}
        print("learn profile", res["learn_profile"], flush=True)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))
        kernel_table = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=40, max_name_column_width=90)
        res["learn_profile"]["kernels"] = kernel_table.splitlines()
        print(kernel_table)
        return out

    st.grpo_update = learn

    if args.model_dir:
        tok = AutoTokenizer.from_pretrained(args.model_dir)
        config = AutoConfig.from_pretrained(args.model_dir)
        if args.layers:
            config.num_hidden_layers = args.layers
            config.layer_types = config.layer_types[:args.layers]
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    res["gpu"] = torch.cuda.get_device_name() if dev == "cuda" else "none"
    res["weights"] = args.weights or "random"
    res["whole_batches"] = args.whole_batches
    with tempfile.TemporaryDirectory() as tmp:
        if args.weights:
            over = {"model": {"name_or_path": args.weights}}
        else:
            save_random_model(config, tok, f"{tmp}/model", dev)
            over = {"model": {"name_or_path": f"{tmp}/model"}, "chat": {"force_max_length": True}}
        over = {**over, "data": {"gsm8k": args.gsm8k}, "train": {"steps": args.steps}}
        cfg = make_config("paper", merge_overrides(over, parse_overrides(args.set)))
        train_set, _, _ = load_problems(cfg, Path(tmp) / "data")
        before = dict(TIMES)

        def on_step(row, step):
            snap = {k: v - before.get(k, 0.0) for k, v in TIMES.items()}
            before.update(TIMES)
            res["steps"].append({"step": step, "parts": snap, "calls": CALLS[:],
                                 **{k: v for k, v in row.items() if k.startswith("perf/")}})
            CALLS.clear()
            print(f"step {step}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(snap.items())), flush=True)

        if args.runs == 1:
            tr.train(cfg, "chat", 0, Path(tmp) / "run", train_set, progress=False, loggers=(on_step,))
        else:  # the parts between run 0's records: one whole shared step, every run's learning included
            cfg = make_config("paper", merge_overrides(merge_overrides(over, parse_overrides(args.set)),
                                                       {"train": {"runs_per_process": args.runs}}))
            arms = [("chat", "cut")[j % 2] for j in range(args.runs)]  # as the recipe's six, and gpu_shared's
            tr.train_runs(cfg, [(arms[j], j // 2, Path(tmp) / f"run-{j}") for j in range(args.runs)], train_set,
                          progress=False, loggers=[(on_step,)] + [()] * (args.runs - 1))
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    last = res["steps"][-2] if len(res["steps"]) > 1 else res["steps"][-1]  # the last step also times variants
    print(f"\nstep {last['step']} ({last['perf/seconds']:.2f} s):")
    for k, v in sorted(last["parts"].items()):
        print(f"  {k:<44}{v:8.3f} s")
    for c in last["calls"]:
        print(f"  generate: {c['rows']:4d} rows, limit {c['limit']:4d}, {c['decode_steps']:4d} decode steps, rows "
              f"writing by tenth of the steps {c['writing_by_tenth']}, {c['row_share']:.2f} of the row-steps")
    for r in res["variants"]:
        print(f"  learn {r['variant']:<10} {r['seconds']:6.2f} s  {r['row_tokens_per_s']:8.0f} row tok/s  "
              f"{r['microbatches']:3d} micro-batches  plan {r['plan_s']:.3f} s  peak {r['peak_gb']:.1f} GB")


if __name__ == "__main__":
    main()
