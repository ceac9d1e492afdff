"""Our sampler against vLLM, the sampler TRL, verl and OpenRLHF use, on the same workload, in one process.

The workload is the first turn of one step of six runs sharing a process, as the paper preset plays it: 8
problems x 4 chats a run, 192 rows, each run's rows through its own LoRA adapter (r 32, alpha 64, every linear
layer, as `model.lora_r` and `model.lora_targets`), temperature 1 with no top-k or top-p, messages of at most
`chat.max_message_tokens` (160) tokens that end where the model ends them. The prompts are the seat A views of 48
training problems (the rollout's views through the model's chat template, token ids in); the adapters are PEFT's
with B drawn at random (seeded), so that each changes what its rows sample.

Each sampler runs one warm-up call, then `--repeats` timed calls of the same 192 rows: wall seconds, the tokens
it generated (stop token included) and tokens per second. Ours: `StaticEngine(..., slots=6)`, one `generate` with
each row's slot. vLLM: `LLM(model=FOLDER, enable_lora=True, max_loras=6, max_lora_rank=32)`, one `generate` over
token-id prompts with each row's `LoRARequest` and `SamplingParams(temperature=1, top_p=1, top_k=0 or -1,
max_tokens=160, stop_token_ids=the model's stops)`. vLLM gets as much GPU memory as `--vllm-memory` allows, runs
after ours in the same process, and is never imported by the package: it is a benchmark here, not a dependency.

vLLM on the GPU machine: its torch is 2.11, so the vLLM to carry (as wheels, with the dependencies that machine
lacks) is the newest release whose metadata pins torch==2.11.0: 0.26.0 (0.27.0 to 0.29.0 pin torch 2.13.0,
0.34.0 pins 2.14.0; 0.30.0 to 0.33.0 publish no metadata file on PyPI's simple index). Its closure beyond what
that machine has (torch and its CUDA libraries, transformers, tokenizers, numpy...) is 166 wheels, 1.05 GB
(`bench/results/vllm_peer-h100-2026-12-05-wheels.txt`); installed with `pip install --no-deps --target DIR` and
put first on PYTHONPATH for this script alone, since it brings numpy 2.3.5 (numba 0.65 and mistral-common want
numpy < 2.4) where the machine has 2.5.2.

    python bench/gguf_to_folder.py tied.gguf /tmp/qwen-coder --dtype bfloat16
    python bench/vllm_peer.py --model /tmp/qwen-coder --gsm8k GSM8K_DIR --out vllm_peer.json
    python bench/vllm_peer.py --model TINY_FOLDER --gsm8k GSM8K_DIR --device cpu --skip-vllm --out smoke.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from random_model import run_facts


def workload(model_dir: str, gsm8k: str, runs: int, problems: int, chats: int, device: str) -> dict:
    """The first-turn prompts of `runs` runs' `problems` problems x `chats` chats (run j's rows are block j), the
    preset's limit and stops, and our slot-mode engine holding `runs` adapters, each also saved (PEFT's format)
    under a temporary folder for vLLM."""
    from talktosolve.arms import ARMS
    from talktosolve.config import make_config, merge_overrides
    from talktosolve.model.policy import load_base, load_tokenizer, make_trainable, resolve_device, stop_ids
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.fast_engine import StaticEngine
    from talktosolve.task.tasks import load_problems
    from talktosolve.team.chat import Seat, render_view, view

    cfg = make_config("paper", merge_overrides({"model": {"name_or_path": model_dir}, "data": {"gsm8k": gsm8k}}, {}))
    tmp = Path(tempfile.mkdtemp(prefix="vllm-peer-"))
    train_set, _, _ = load_problems(cfg, tmp / "data")
    protocol, arm = protocol_of(cfg.chat), ARMS["chat"]
    tok = load_tokenizer(cfg.model)
    texts = []
    for j in range(runs):
        for p in train_set[j * problems:(j + 1) * problems]:
            hands = arm.hands(p.facts, protocol.seats)
            seat = Seat(hands[protocol.speaker(0)], p.question)
            texts += [render_view(tok, view(seat, 0, [], arm, protocol, cfg.chat))] * chats
    prompts = [list(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]
    model = make_trainable(load_base(cfg.model, resolve_device(device)), cfg.model)
    stops = stop_ids(tok, model)
    engine = StaticEngine(model, stop_ids=stops, pad_id=tok.pad_token_id, temperature=1.0, slots=runs)
    for j in range(runs):
        torch.manual_seed(1000 + j)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_A" in name or "lora_B" in name:
                    p.normal_(0, 0.02)
        model.save_pretrained(tmp / f"adapter-{j}")
        engine.store_adapter(j)
    return {"cfg": cfg, "prompts": prompts, "adapters": [tmp / f"adapter-{j}" for j in range(runs)],
            "limit": protocol.max_tokens(0), "stops": stops, "rows_per_run": problems * chats, "engine": engine}


def time_calls(call, repeats: int, device: str) -> dict:
    """One warm-up call, then `repeats` timed ones: each call returns the generated rows (lists of ids)."""
    call()
    out = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        rows = call()
        if device == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        tokens = sum(len(r) for r in rows)
        out.append({"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                    "longest": max(len(r) for r in rows)})
    return {"calls": out, "median_tokens_per_s": sorted(r["tokens_per_s"] for r in out)[len(out) // 2]}


def ours(w: dict, device: str, repeats: int) -> dict:
    """Our slot-mode engine: one `generate` a call, block j of the rows through slot j."""
    engine, runs = w.pop("engine"), len(w["adapters"])
    gen = torch.Generator(device=device).manual_seed(0)
    result = time_calls(lambda: engine.generate(w["prompts"], w["limit"], gen, slots=runs), repeats, device)
    engine.release(weights=True)  # the KV pool and graphs (the model stays: a few GB beside vLLM's share)
    return result


def vllm(w: dict, model_dir: str, repeats: int, memory: float) -> dict:
    import vllm as v
    from vllm.lora.request import LoRARequest

    runs = len(w["adapters"])
    llm = v.LLM(model=model_dir, dtype="bfloat16", enable_lora=True, max_loras=runs,
                max_lora_rank=w["cfg"].model.lora_r, gpu_memory_utilization=memory, seed=0, enable_prefix_caching=True)
    params = v.SamplingParams(temperature=1.0, top_p=1.0, max_tokens=w["limit"], stop_token_ids=w["stops"],
                              skip_special_tokens=False, detokenize=False)
    requests = [LoRARequest(f"run-{j}", j + 1, str(path)) for j, path in enumerate(w["adapters"])]
    per_row = [requests[i // w["rows_per_run"]] for i in range(len(w["prompts"]))]
    prompts = [{"prompt_token_ids": p} for p in w["prompts"]]

    def call():
        outs = llm.generate(prompts, params, lora_request=per_row, use_tqdm=False)
        return [list(o.outputs[0].token_ids) for o in outs]

    return {"version": v.__version__, **time_calls(call, repeats, "cuda")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model folder (bench/gguf_to_folder.py writes one from a GGUF)")
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--problems", type=int, default=8, help="problems per run (train.problems_per_step)")
    ap.add_argument("--chats", type=int, default=4, help="chats per problem (train.chats_per_problem)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--skip-vllm", action="store_true", help="ours alone (a smoke run of the script on a CPU)")
    ap.add_argument("--vllm-memory", type=float, default=0.6, help="vLLM's gpu_memory_utilization")
    args = ap.parse_args()

    w = workload(args.model, args.gsm8k, args.runs, args.problems, args.chats, args.device)
    res = {**run_facts(args.device), "model": args.model, "rows": len(w["prompts"]), "runs": args.runs,
           "limit": w["limit"], "prompt_tokens": sum(len(p) for p in w["prompts"]), "ours": ours(w, args.device,
                                                                                                 args.repeats)}
    print(f"ours: {res['ours']['median_tokens_per_s']:.0f} tokens/s (median of {args.repeats})", flush=True)
    if not args.skip_vllm:
        res["vllm"] = vllm(w, args.model, args.repeats, args.vllm_memory)
        res["ours_over_vllm"] = res["ours"]["median_tokens_per_s"] / res["vllm"]["median_tokens_per_s"]
        print(f"vLLM {res['vllm']['version']}: {res['vllm']['median_tokens_per_s']:.0f} tokens/s; ours / vLLM "
              f"{res['ours_over_vllm']:.2f}", flush=True)
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
