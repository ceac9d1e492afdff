"""Slot mode's decode step against the merged one, and its two forms, on one GPU, in one process.

A random-init model of the real Qwen2.5-1.5B-Instruct config (bf16) under the paper preset's LoRA (r=32 on every
linear layer); 300-token random prompts, 384 tokens forced after them; ms per decode step = (a 384-token call -
a 1-token call) / 383, the KV shape fixed so both calls replay one graph. Rows:

  merged         no slots: the adapter merged into the sampling weights (a learner sampling alone)
  stacked        slot mode as the engine has it: A stacked under the base weight, so x @ A comes out of the
                 base's matmul (`fast_layers.linear`)
  side_by_side   slot mode with A a matmul of its own, ((x @ A) * mask) @ B added to F.linear(x, W): the form
                 `stacked` replaced, rebuilt here for the comparison

each at batch 32 with one slot (half the rows the learner's, half the base's: a 50% base-partner mixture's turn)
and at batch 192 with six slots of 32 rows (six runs in one process), plus the GPU memory each engine's weights
take (the stacked engine holds the base once: the model reads views of its tensors). Prints a table and writes
JSON.

  python bench/profile_slots.py --model-dir QWEN_CONFIG_AND_TOKENIZER_DIR --out slots.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from random_model import random_lora_model, run_facts

import talktosolve.sampling.fast_layers as fl
import talktosolve.sampling.weights as sw

STACKED = (fl.linear, sw.Fused.make_slots, sw.Fused.store, sw.Fused.slot_lora)


def side_by_side_linear(x, w, b=None, lora=None):
    y = F.linear(x, w, b)
    if lora is None:
        return y
    a, b_up, mask = lora
    return y + ((x @ a) * mask) @ b_up


@torch.no_grad()
def side_by_side_make_slots(self, n):
    if len(self.parts) == 1:
        self.weight = self.parts[0][1].weight.detach()
    ranks = [m.lora_A[sw.only_adapter(m)].weight.shape[0] for m, _, lora in self.parts if lora]
    self.rank, self.a, self.b = sum(ranks), None, None
    if ranks:
        n_in, n_out, dt = self.weight.shape[1], self.weight.shape[0], self.weight.dtype
        self.a = torch.zeros(n_in, n * self.rank, device=self.weight.device, dtype=dt)
        self.b = torch.zeros(n * self.rank, n_out, device=self.weight.device, dtype=dt)


@torch.no_grad()
def side_by_side_store(self, slot):
    if self.a is None:
        return
    row, col = 0, slot * self.rank
    for m, base, lora in self.parts:
        n = base.weight.shape[0]
        if lora:
            name = sw.only_adapter(m)
            a, b = m.lora_A[name].weight, m.lora_B[name].weight
            r = a.shape[0]
            self.a[:, col:col + r].copy_(a.t())
            self.b[col:col + r, row:row + n].copy_((m.scaling[name] * b.float()).t())
            col += r
        row += n


def side_by_side_slot_lora(self, masks):
    return None if self.a is None else (self.a, self.b, masks[self.rank])


def use(form: str) -> None:
    parts = STACKED if form == "stacked" else (side_by_side_linear, side_by_side_make_slots, side_by_side_store,
                                               side_by_side_slot_lora)
    fl.linear, sw.Fused.make_slots, sw.Fused.store, sw.Fused.slot_lora = parts
    torch._dynamo.reset()  # the compiled layer read the other form's `linear`


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=384)
    args = ap.parse_args()

    from transformers import AutoConfig, AutoTokenizer

    from talktosolve.sampling.fast_engine import StaticEngine

    res = {**run_facts(), "model": "Qwen2.5-1.5B-Instruct config, random init, bf16, LoRA r=32 all-linear",
           "prompt_tokens": 300, "new_tokens": args.new_tokens, "rows": []}
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    model = random_lora_model(AutoConfig.from_pretrained(args.model_dir))
    g = torch.Generator().manual_seed(0)
    n = args.new_tokens

    def time_ms(eng, prompts, **kw):
        gen = torch.Generator(device="cuda").manual_seed(0)
        cap = 300 + n
        for k in (n, 1):
            eng.generate(prompts, k, gen, capacity=cap, **kw)
        times = []
        for k in (1, n):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            eng.generate(prompts, k, gen, capacity=cap, **kw)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return (times[1] - times[0]) / (n - 1)

    for form, slots, batch in (("merged", 0, 32), ("side_by_side", 1, 32), ("stacked", 1, 32),
                               ("merged", 0, 192), ("side_by_side", 6, 192), ("stacked", 6, 192)):
        use("side_by_side" if form == "side_by_side" else "stacked")
        torch.cuda.empty_cache()
        before = torch.cuda.memory_allocated()
        eng = StaticEngine(model, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id, force_max_length=True,
                           slots=slots)
        weights_gb = (torch.cuda.memory_allocated() - before) / 2 ** 30
        kw = {}
        if slots:
            for j in range(slots):
                eng.store_adapter(j)
            kw["adapters"] = ([0] * 16 + [None] * 16) if slots == 1 else [j for j in range(6) for _ in range(32)]
        else:
            eng.refresh()
        prompts = [torch.randint(0, 150000, (300,), generator=g).tolist() for _ in range(batch)]
        ms = time_ms(eng, prompts, **kw)
        row = {"form": form, "slots": slots, "batch": batch, "ms_per_step": ms, "engine_weights_gb": weights_gb}
        res["rows"].append(row)
        print(row, flush=True)
        del eng
    use("stacked")
    for batch in (32, 192):
        by = {r["form"]: r["ms_per_step"] for r in res["rows"] if r["batch"] == batch}
        res[f"b{batch}_side_by_side_over_stacked"] = by["side_by_side"] / by["stacked"]
        res[f"b{batch}_stacked_over_merged"] = by["stacked"] / by["merged"]
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n")
    print(f"{'form':<14}{'slots':>6}{'batch':>7}{'ms/step':>9}{'weights GB':>12}")
    for r in res["rows"]:
        print(f"{r['form']:<14}{r['slots']:>6}{r['batch']:>7}{r['ms_per_step']:>9.3f}{r['engine_weights_gb']:>12.2f}")


if __name__ == "__main__":
    main()
