"""The paper recipe's floor on one GPU: the least time its work could take with every kernel at the chip's peak,
HBM bandwidth where a kernel is bound by reading memory and the bf16 dense rate where it is bound by arithmetic.
The measured figures and the speed targets read against it.

The work is counted, not assumed: the recipe's chats are played through the project's own rollout
(`rollout.play_chats`: the real tokenizer and views, sessions, shared runs read once by `prefixes.plan`) by an
engine that computes nothing and writes every message at its maximum length with random ids, as the GPU
benchmarks' random-init model does. It records each call's rows, prompt lengths and the tokens a `StaticEngine`
would read. Then, for the Qwen2.5-1.5B shape of the given config:

  decode    a step reads the bf16 weights once (base, output layer and the slots' adapters) and every row's K/V
            so far; its arithmetic is 2 x the linear weights a row plus attention over the row's context (also
            counted, as `kv_padded_gb`: the K/V a step would read with every row as long as the call's longest,
            left padding included)
  prefill   every token read goes through the linear layers (2 x weights) and attends over its context
  learning  each run-step's rows as the learner reads them (a seat's earlier message inside its final view when
            its ids begin that view): forward and input gradient through the frozen weights (4 x weights a
            token), the adapters' forward and both gradients (6 x adapter weights), attention 3x its forward, and
            the output layer at message tokens (forward, again in backward, input gradient: 6 x vocab x hidden)

Each decode step's floor is max(bytes / bandwidth, FLOPs / rate); prefill and learning are counted as FLOPs /
rate (they are bound by arithmetic). The recipe: 80 steps of its `--runs` runs in one process (six: three chat,
three cut; twelve: six seeds per arm), a step's runs x 8 problems x 4 chats one call a turn, and its 3 x runs + 2
evaluations (300 problems x 2 chats; half of each arm: each run's three and the untrained pair) `--batch-evals` at
a time, that many x 128 chats a pass. Defaults are the H200 SXM's datasheet figures. Prints a table and writes
JSON; `--train-steps` and `--eval-problems` count fewer and scale up (a quick run).

  python bench/floor.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --out floor.json
  python bench/floor.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --gsm8k GSM8K_DIR --runs 12 --out floor12.json
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path


class Counting:
    """An engine that samples nothing: each row's message is `max_new_tokens` random non-stop ids. It keeps what a
    `StaticEngine` session would hold and counts what each call would read."""

    def __init__(self, vocab: int, stop_ids, slots: int, seed: int = 0):
        self.stop_ids, self.slots, self.vocab = list(stop_ids), slots, vocab
        self.rng = random.Random(seed)
        self.calls: list[dict] = []

    def generate(self, prompts, max_new_tokens, generator=None, *, session=None, adapters=None, **_):
        from talktosolve.sampling import fast_layers, prefixes

        reuse = fast_layers.reusable(session, prompts)
        plan = prefixes.plan(prompts, reuse, adapters)
        known = [r + n for r, n in zip(reuse, plan.shared)] if plan else reuse
        read = sum(len(p) - k for p, k in zip(prompts, known)) + (sum(plan.runs) if plan else 0)
        stops = set(self.stop_ids)
        rows = [[t for t in (self.rng.randrange(self.vocab) for _ in range(2 * max_new_tokens)) if t not in stops]
                [:max_new_tokens] for _ in prompts]
        self.calls.append({"lengths": [len(p) for p in prompts], "read": read, "new": max_new_tokens,
                           "adapters": len({a for a in (adapters or [None]) if a is not None})})
        if session is not None:
            session.ids = [p + r[:-1] for p, r in zip(prompts, rows)] if session.keep else None
        return rows


def learner_tokens(chats) -> tuple[int, int, int]:
    """(row tokens, message tokens, sum over rows of length squared) as the learner reads the chats: a seat's
    message whose ids begin its next view is read inside that view's row."""
    rows, messages, squares = 0, 0, 0
    for c in chats:
        for seat in {t.speaker for t in c.turns}:
            mine = [t for t in c.turns if t.speaker == seat]
            for t, after in zip(mine, mine[1:] + [None]):
                messages += len(t.completion_ids)
                whole = t.prompt_ids + t.completion_ids
                if after is None or after.prompt_ids[:len(whole) - 1] != whole[:-1]:
                    rows += len(whole)
                    squares += len(whole) ** 2
    return rows, messages, squares


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--gsm8k", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bandwidth", type=float, default=4.8e12, help="bytes/s (H200 SXM datasheet: 4.8 TB/s)")
    ap.add_argument("--flops", type=float, default=989e12, help="bf16 dense FLOP/s (H200 SXM datasheet: 989 TFLOPS)")
    ap.add_argument("--train-steps", type=int, default=80, help="steps counted (scaled to the recipe's 80)")
    ap.add_argument("--eval-problems", type=int, default=300, help="problems an evaluation counts (scaled to 300)")
    ap.add_argument("--runs", type=int, default=6, help="runs in one process, half of each arm")
    ap.add_argument("--batch-evals", type=int, default=6, help="evaluations played together, a pass")
    args = ap.parse_args()
    if args.runs < 2 or args.runs % 2 or args.batch_evals < 1:
        raise SystemExit(f"--runs needs an even number of at least 2 and --batch-evals at least 1 "
                         f"(got {args.runs} and {args.batch_evals})")

    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.arms import ARMS
    from talktosolve.config import make_config
    from talktosolve.experiment.step import step_problems
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.rollout import Player, play_chats
    from talktosolve.task.tasks import load_problems

    cfg = make_config("paper", {"data": {"gsm8k": args.gsm8k}})
    mc = AutoConfig.from_pretrained(args.model_dir)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    H, I, n_layers, V = mc.hidden_size, mc.intermediate_size, mc.num_hidden_layers, mc.vocab_size
    D = getattr(mc, "head_dim", None) or H // mc.num_attention_heads
    q_width, kv_width = mc.num_attention_heads * D, mc.num_key_value_heads * D
    shapes = [(H, q_width + 2 * kv_width), (q_width, H), (H, 2 * I), (I, H)]  # q|k|v, o, gate|up, down
    linear = n_layers * sum(a * b for a, b in shapes)
    # LoRA on every linear layer (the preset's "all-linear"): r x (in + out) for q, k, v, o, gate, up and down
    adapter = n_layers * cfg.model.lora_r * (7 * H + 2 * q_width + 2 * kv_width + 3 * I)
    kv_token = n_layers * 2 * kv_width * 2  # bytes of K and V a token, bf16
    attn = lambda context: 4 * q_width * context  # noqa: E731  FLOPs of one query over `context` keys
    protocol = protocol_of(cfg.chat)
    with tempfile.TemporaryDirectory() as tmp:
        train_set, test_set, _ = load_problems(cfg, Path(tmp))
    stops = [tok.eos_token_id] + ([tok.convert_tokens_to_ids("<|im_end|>")] if "<|im_end|>" in tok.get_vocab() else [])

    def phase_floor(engine: Counting, weight_bytes_per_step, passes: int = 1) -> dict:
        """Seconds at peak of the decode steps and prefill of `engine`'s calls (call i of every `passes` shares its
        decode steps' weight reads with the others of its pass), and what they moved and computed."""
        decode_s = kv_bytes = kv_padded = weight_bytes = decode_flops = prefill_flops = 0.0
        for c in engine.calls:
            for step in range(1, c["new"]):  # the first token comes out of prefill
                kv = sum(n + step for n in c["lengths"]) * kv_token
                # what a kernel reading every column from the first would read: each row as long as the longest
                kv_padded += len(c["lengths"]) * (max(c["lengths"]) + step) * kv_token
                w = weight_bytes_per_step(c["adapters"]) / passes
                flops = len(c["lengths"]) * 2 * linear + sum(attn(n + step) for n in c["lengths"])
                decode_s += max((kv + w) / args.bandwidth, flops / args.flops)
                kv_bytes, weight_bytes, decode_flops = kv_bytes + kv, weight_bytes + w, decode_flops + flops
            # each row's new tokens attend over at most its whole prompt: an upper bound on attention's share
            prefill_flops += c["read"] * 2 * linear + sum(attn(n) for n in c["lengths"]) * c["read"] / len(c["lengths"])
        return {"decode_seconds": decode_s, "prefill_seconds": prefill_flops / args.flops, "kv_gb": kv_bytes / 1e9,
                "kv_padded_gb": kv_padded / 1e9,
                "weight_gb": weight_bytes / 1e9, "decode_tflop": decode_flops / 1e12,
                "prefill_tflop": prefill_flops / 1e12,
                "decode_steps": sum(c["new"] - 1 for c in engine.calls),
                "tokens_read": sum(c["read"] for c in engine.calls)}

    weights = lambda slots: 2 * (linear + V * H + slots * adapter)  # noqa: E731  bytes a decode step reads
    # Training: the runs share one slot-mode engine; each step 8 problems x 4 chats a run, one call a turn.
    runs = [("chat", "cut")[j % 2] for j in range(args.runs)]
    seeds = [j // 2 for j in range(args.runs)]
    t = cfg.train
    train_engine = Counting(V, stops, slots=args.runs)
    learn = {"rows": 0, "messages": 0, "squares": 0}
    counted_steps = min(args.train_steps, t.steps)
    for step in range(counted_steps):
        problems, arms, lineups = [], [], []
        for j, (arm, seed) in enumerate(zip(runs, seeds)):
            mine = step_problems(train_set, seed, step, t.problems_per_step)
            problems += mine
            arms += [ARMS[arm]] * len(mine)
            player = Player(train_engine, tok, adapter=j)
            lineups += [{s: player for s in protocol.seats}] * (len(mine) * t.chats_per_problem)
        chats = play_chats(problems, arms, lineups, protocol, cfg.chat, chats_per_problem=t.chats_per_problem,
                           seed=step)
        for key, value in zip(("rows", "messages", "squares"), learner_tokens(chats)):
            learn[key] += value
    scale = t.steps / counted_steps
    sampling = {k: v * scale for k, v in phase_floor(train_engine, weights).items()}
    learn = {k: v * scale for k, v in learn.items()}
    learn_flops = (learn["rows"] * (4 * linear + 6 * adapter) + 3 * 2 * q_width * learn["squares"]
                   + learn["messages"] * 6 * V * H)
    learning = {"row_tokens": learn["rows"], "message_tokens": learn["messages"], "tflop": learn_flops / 1e12,
                "seconds": learn_flops / args.flops}

    # Evaluations: 3 x runs + 2 of 300 problems x 2 chats (half of each arm), 128 chats a batch, `batch_evals` a
    # pass.
    e = cfg.eval
    n_evals = 3 * args.runs + 2
    n_problems = min(args.eval_problems, e.n_problems)
    per_batch = e.batch_chats // e.chats_per_problem
    eval_engine = Counting(V, stops, slots=args.batch_evals)
    for arm in ("chat", "cut"):
        for start in range(0, n_problems, per_batch):
            batch = test_set[start:start + per_batch]
            player = Player(eval_engine, tok, adapter=0)
            play_chats(batch, ARMS[arm], {s: player for s in protocol.seats}, protocol, cfg.chat,
                       chats_per_problem=e.chats_per_problem, seed=e.seed)
    # Counted once per arm; the recipe has n_evals / 2 of each, `batch_evals` at a time (weights shared by a pass).
    evaluations = {k: v * n_evals / 2 * e.n_problems / n_problems
                   for k, v in phase_floor(eval_engine, weights, passes=args.batch_evals).items()}

    res = {"model": {"hidden": H, "layers": n_layers, "vocab": V, "linear_params": linear, "adapter_params": adapter,
                     "kv_bytes_per_token": kv_token},
           "chip": {"bandwidth": args.bandwidth, "flops": args.flops},
           "counted": {"train_steps": counted_steps, "eval_problems": n_problems},
           "recipe": {"runs": args.runs, "evaluations": n_evals, "batch_evals": args.batch_evals},
           "sampling": sampling, "learning": learning, "evaluations": evaluations}
    train_s = sampling["decode_seconds"] + sampling["prefill_seconds"] + learning["seconds"]
    eval_s = evaluations["decode_seconds"] + evaluations["prefill_seconds"]
    res["floor_gpu_minutes"] = {"training": train_s / 60, "evaluations": eval_s / 60, "recipe": (train_s + eval_s) / 60,
                                "per_step_seconds": train_s / t.steps}
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{'floor at peak, GPU-minutes':<40}{'decode':>9}{'prefill':>9}{'learning':>10}{'total':>8}")
    print(f"{f'training: 80 steps of {args.runs} runs':<40}{sampling['decode_seconds'] / 60:>9.2f}"
          f"{sampling['prefill_seconds'] / 60:>9.2f}{learning['seconds'] / 60:>10.2f}{train_s / 60:>8.2f}")
    print(f"{f'the {n_evals} evaluations':<40}{evaluations['decode_seconds'] / 60:>9.2f}"
          f"{evaluations['prefill_seconds'] / 60:>9.2f}{'':>10}{eval_s / 60:>8.2f}")
    print(f"{'the recipe':<40}{'':>28}{(train_s + eval_s) / 60:>8.2f}")
    print(f"decode reads: training {sampling['kv_gb'] / 1e3:.1f} TB of K/V and {sampling['weight_gb'] / 1e3:.1f} TB of "
          f"weights; evaluations {evaluations['kv_gb'] / 1e3:.1f} TB and {evaluations['weight_gb'] / 1e3:.1f} TB")
    print(f"tokens read by prefill: training {sampling['tokens_read']:,.0f}, "
          f"evaluations {evaluations['tokens_read']:,.0f}; learner rows {learning['row_tokens']:,.0f} tokens")


if __name__ == "__main__":
    main()
