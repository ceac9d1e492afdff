r"""The GRPO learner: team rewards in, one on-policy update out. It never sees chat text, only token ids.

The objective, for one step over problems q = 1..Q, each with G chats, each chat with T messages (the turns of
the team's protocol, N seats):

    r_{q,g}  = (1/N) * sum_s correct_s                           team reward of chat g on problem q (`reward`)
    A_{q,g}  = r_{q,g} - (1/G) * sum_g' r_{q,g'}                 advantage: group-centred, NO std scaling
    message m of chat (q,g) is a sample (x_m, y_m): its writer's view x_m and its own generated tokens y_m;
    every message of the chat carries the chat's advantage A_{q,g}.

    L(theta) = - (1 / N) * sum_m sum_{t < |y_m|} A_m * pi_theta(y_{m,t} | x_m, y_{m,<t}) / sg[pi_theta(...)]
    N        = sum_m |y_m|                                       every token the learner generated in the step

so grad L = -(1/N) sum_m A_m sum_t grad log pi(y_{m,t}). One update per batch (on-policy), so the PPO ratio is 1
and the clip never acts: we drop it rather than compute a no-op. No KL term, no reference model (an option
below adds one).

Departures from textbook GRPO (Shao et al. 2024), all from the recipe (Park et al., arXiv:2502.18439):
- no division of the advantage by the group's standard deviation (it over-weights near-uniform groups);
- no KL penalty, one on-policy update per batch (no ratio clipping needed);
- the loss is normalised by the step's total generated-token count N (token-level, as DAPO and TRL's
  `bnpo`/`dapo`), not per-sequence then per-group: long and short messages weigh by their tokens. Because N is
  the whole step's count, gradient accumulation over micro-batches gives exactly the full-batch gradient;
- the reward is a team reward shared by every seat's messages (multi-agent; the seats share one policy, or
  with per-role weights one each: below).

Options that depart further, each off in the recipe (`paper`) and on in the presets that say so:
- a KL penalty to the untrained base (`train.kl_coef` = beta): L += beta * (1/N) * sum_m sum_t k3_{m,t}, with
  k3 = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1 at the sampled tokens (Schulman's estimator, as in
  Shao et al.), pi_ref the base: under LoRA the same model with its adapter off, so no second model is held.
  Every message is then read, those with a zero advantage too (the penalty applies to them);
- informative groups (`train.dynamic_sampling`, as in DAPO, Yu et al. 2025): the step's Q groups are the first
  Q drawn whose rewards differ, drawing batches of Q problems up to `train.max_draws` (`train.draw_batches` of
  them a sampling pass); the objective above is unchanged, over the groups kept (N counts their tokens only);
- a training pool by difficulty (`train.pool_chats`): problems are drawn only from those the untrained team
  solved in between `pool_min` and `pool_max` of `pool_chats` chats (`pool.py`); the objective is unchanged.

Frozen partners (`train.partners`, `partners.py`): in some problems one seat is played by a frozen partner
(the untrained base, a snapshot of the learner or another run: `train.partner`). Its messages are not samples: they get no gradient, and their tokens are not in N (the sums over m run
over the learner's messages only). Such a problem seats the partner in all of its G chats, so a group is never
mixed: the advantage stays centred per problem over its chats, and the baseline is the mean reward of the same
team on the same problem. A group mixing self-play and partner chats would charge the learner's messages in its
partner chats for the partner's weakness (their rewards sit below a mean lifted by the self-play chats), a
negative advantage no message of theirs earned.

Per-role weights (`model.adapters=per_role`): each seat r has its own weights theta_r, all starting equal. Its
loss is the objective above over its own seat's messages only, L_r(theta_r) = -(1/N_r) sum_{m: seat r} ...,
with N_r = sum of |y_m| over those messages: each role is a mean over its own tokens, so a role that writes less
is not trained more weakly. The advantages are the same team advantages for every role: the team reward is what
both are trained on, and centring it per problem is unchanged. A role none of whose messages is trained in a
step (a frozen partner held its seat in every chat) makes no update that step.

A message whose exact tokens begin a later view of the same chat (a copy's first message inside its final
view) is read from that view's row instead of its own (`to_sequences`): same log-probs, less compute. A message
whose advantage is 0 (every chat of a group that scored alike: most groups early on, nearly all of the cut
arm's) adds exactly 0 to L and its gradient, so it is not read at all; its tokens still count in N, and the
optimizer still steps (on zero gradients when every message of the step is skipped), as it would have.

On a GPU where FlashAttention's varlen kernel runs, a micro-batch's rows are packed into one sequence
(`learn_packing`): rows that begin with the same run of tokens (a seat's view on one problem begins every one of
its chats' rows) read that run once, and nothing is padded. Same log-probs (attention is causal, so a run's keys
and values are the same in every row that begins with it), less compute; elsewhere rows are right-padded.

pi is the distribution the sampler draws from: softmax(logits / T), T = `chat.temperature` (1, and 1.7 in the
`micro-weak` presets), so the update is on-policy at any temperature, and the KL penalty compares the two policies
at the same T.

Log-probs are taken for the chosen tokens only: the backbone's hidden states at completion positions go
through the output layer in chunks, so no [tokens x vocabulary] fp32 tensor ever lives for the whole batch. On a
GPU, with the output layer frozen (LoRA), each chunk's input gradient is taken in the forward pass, where its
softmax is at hand (`ChosenLogprobs`); elsewhere each chunk is recomputed in the backward pass (activation
checkpointing).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from talktosolve.learning import learn_packing
from talktosolve.learning.logprobs import packed_token_logprobs, token_logprobs
from talktosolve.model.policy import base_model
from talktosolve.sampling import prefill_attention


@dataclass
class Sample:
    """One trained message: its prompt (the writer's view), its generated tokens, and its advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float
    group: int
    """Index of the chat it belongs to (micro-batches hold whole chats)."""


def group_advantages(rewards: list[list[float]]) -> list[list[float]]:
    """rewards[q][g] -> advantages[q][g] = r - mean_g r (no std scaling)."""
    out = []
    for group in rewards:
        if not group:
            raise ValueError("a problem with no chats has no advantage")
        mean = sum(group) / len(group)
        out.append([r - mean for r in group])
    return out


@dataclass
class Sequence:
    """One forward pass's row: token ids and the spans of trained tokens in it, each with its advantage."""

    ids: list[int]
    spans: list[tuple[int, int, float]]
    """(start, end, advantage): tokens ids[start:end] were generated and are trained."""


def to_sequences(samples: list[Sample]) -> list[Sequence]:
    """One row per message, except that a message whose whole text (prompt + completion) begins a later view of
    the same chat rides inside that view's row instead of getting its own.

    A copy's final view holds its first message as an assistant part, so when the tokenizer reproduces the
    generated ids exactly (the micro tokenizer does; byte-level BPE templates may not, and then nothing is
    merged), the learner reads both messages from one forward pass. The log-probs are the same either way
    (causal attention: a token sees only its prefix); this only saves compute.
    """
    rows: list[Sequence] = []
    by_group: dict[int, list[Sample]] = {}
    for smp in samples:
        by_group.setdefault(smp.group, []).append(smp)
    for group in by_group.values():
        group = sorted(group, key=lambda x: len(x.prompt_ids) + len(x.completion_ids), reverse=True)
        mine: list[Sequence] = []
        for smp in group:
            full = smp.prompt_ids + smp.completion_ids
            span = (len(smp.prompt_ids), len(full), smp.advantage)
            host = next((r for r in mine if len(r.ids) >= len(full) and r.ids[:len(full)] == full), None)
            if host is not None:
                host.spans.append(span)
            else:
                mine.append(Sequence(full, [span]))
        for r in mine:
            r.spans.sort()
        rows += mine
    return rows


def microbatches(rows: list[Sequence], chats_per_microbatch: int, max_tokens: int = 0,
                 pad_multiple: int = 1, messages_per_chat: int = 4) -> list[list[Sequence]]:
    """Rows grouped by length into micro-batches: as many messages as `chats_per_microbatch` chats hold, or,
    with `max_tokens` > 0, as many rows as fit that many padded tokens (rows x width, the width rounded up to
    `pad_multiple`); a row longer than the budget goes alone.

    A chat's messages differ a lot in length (the last view holds the whole chat), so grouping rows of similar
    length instead of whole chats cuts the padding. The update is the same either way: the loss is a sum over
    tokens divided by the step's token count, whatever the grouping.
    """
    size = messages_per_chat * chats_per_microbatch
    out: list[list[Sequence]] = []
    batch: list[Sequence] = []
    spans = 0
    for row in sorted(rows, key=lambda r: len(r.ids)):
        if max_tokens > 0:  # rows come shortest first, so this row sets the padded width
            width = _round_up(len(row.ids), pad_multiple)
            if batch and (len(batch) + 1) * width > max_tokens:
                out.append(batch)
                batch = []
            batch.append(row)
            continue
        batch.append(row)
        spans += len(row.spans)
        if spans >= size:
            out.append(batch)
            batch, spans = [], 0
    return out + ([batch] if batch else [])


PAD_MULTIPLE = 64
"""Padded lengths are rounded up to this, so a run meets few distinct shapes (kernels plan once per shape)."""


def pad_multiple(device) -> int:
    """The multiple padded lengths are rounded up to on `device` (`PAD_MULTIPLE` on CUDA, else 1)."""
    return PAD_MULTIPLE if torch.device(device).type == "cuda" else 1


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def pad_right(rows: list, pad_id: int, device):
    """ids [B, T] and advantages [n] on `device`, and the trained-token mask [B, T] on the CPU (it only serves
    to find positions, which the host can do without waiting for the device); advantages are in row-major
    order of the trained tokens. `rows` are `Sequence`s (or `Sample`s, one message each).

    No attention mask: with right padding and causal attention a real token only ever attends to earlier real
    tokens, and padded positions are never read, so the backbone runs unmasked (flash attention on a GPU
    instead of the masked memory-efficient kernel, and no [B, 1, T, T] mask to build)."""
    rows = [r if isinstance(r, Sequence) else to_sequences([r])[0] for r in rows]
    width = _round_up(max(len(r.ids) for r in rows), pad_multiple(device))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    comp = torch.zeros((len(rows), width), dtype=torch.bool)
    adv = []
    for i, r in enumerate(rows):
        ids[i, :len(r.ids)] = torch.tensor(r.ids)
        for start, end, a in r.spans:
            comp[i, start:end] = True
            adv += [a] * (end - start)
    return (learn_packing.upload(ids, device), comp,
            learn_packing.upload(torch.tensor(adv, dtype=torch.float32), device))


def _autocast_adapter(model, on: bool):
    """bf16 autocast on a GPU: the frozen base is bf16 while the adapter and its optimizer state stay fp32.

    peft would cast every LoRA layer's input to the adapter's fp32 (a full copy of each activation, which
    autocast then casts back to bf16 for the matmul); under autocast that round trip is pure cost, so the
    cast is switched off for the update."""
    from contextlib import nullcontext

    if not on or not hasattr(model, "peft_config"):
        return nullcontext()
    from peft.helpers import disable_input_dtype_casting

    return disable_input_dtype_casting(model)


@dataclass
class StepStats:
    loss: float
    grad_norm: float
    tokens: int
    """Trained (generated) tokens of the step, on every rank."""
    samples: int
    skipped: int = 0
    """Samples not read because their advantage is 0 (they add nothing to the update)."""
    row_tokens: int = 0
    """Tokens this rank's forward passes read (prompts and completions, no padding)."""
    padded_tokens: int = 0
    """What the micro-batches' forward passes read: rows with their padding, or packed rows (each shared run
    once, no padding)."""
    microbatches: int = 0
    kl: float | None = None
    """The k3 estimate of KL(policy || reference), per generated token of the step (with a KL penalty only)."""


PACKED_ROWS = True
"""Pack the learner's rows (`learn_packing`) wherever `packs_rows` allows; False reads right-padded rows everywhere
(the benchmarks time both)."""


def packs_rows(model, device) -> bool:
    """Whether an update packs its rows: on CUDA where FlashAttention's varlen kernel runs, for a model held in
    bf16 or fp16 whose attention transformers dispatches. Elsewhere rows are right-padded: a model held in fp32
    (the micro bases) computes its rotary embedding in fp32 even under autocast, so its queries and keys reach
    the attention in fp32, which the flash kernel refuses."""
    device = torch.device(device)
    if not PACKED_ROWS or device.type != "cuda":
        return False
    base = base_model(model)
    config = getattr(base, "config", None)
    if config is None or not learn_packing.supported(base):
        return False
    if next(base.parameters()).dtype not in (torch.float16, torch.bfloat16):
        return False
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return prefill_attention.available(device, torch.bfloat16, head_dim)


class NonFiniteLoss(RuntimeError):
    """The loss or gradient went NaN/inf; the update was not applied."""


def grpo_update(model, optimizer, samples: list[Sample], *, pad_id: int, chats_per_microbatch: int,
                grad_clip: float, device, n_tokens: int | None = None, microbatch_tokens: int = 0,
                messages_per_chat: int = 4, kl_coef: float = 0.0, reference=None,
                temperature: float = 1.0) -> StepStats:
    """One on-policy GRPO update over all `samples` of a step (gradient accumulated over micro-batches).

    Data-parallel: each rank passes its own samples and the step's global token count `n_tokens`; gradients
    are summed across ranks before clipping, which gives every rank the single-process gradient.

    With `kl_coef` > 0 every sample is read (the penalty applies to zero-advantage messages too) and each
    micro-batch is also read, without gradient, by the reference: `reference` (a frozen model), or when None
    the model itself with its adapter switched off (LoRA). Log-probs are those of the distribution the sampler
    drew from, softmax(logits / `temperature`), for the policy and the reference alike.
    """
    from talktosolve.learning import distributed

    if n_tokens is None:
        n_tokens = sum(len(s.completion_ids) for s in samples)
    if n_tokens == 0:
        raise ValueError("no generated tokens in this step: nothing to train on")
    model.train()
    optimizer.zero_grad(set_to_none=True)
    device = torch.device(device)
    total = torch.zeros((), device=device)
    gpu = device.type == "cuda"
    trained = samples if kl_coef > 0 else [s for s in samples if s.advantage != 0]
    kl_total = torch.zeros((), device=device)
    rows = to_sequences(trained)
    packs = packs_rows(model, device)
    if packs and microbatch_tokens > 0:
        batches = learn_packing.microbatches(rows, microbatch_tokens)
    else:
        batches = microbatches(rows, chats_per_microbatch, microbatch_tokens, pad_multiple(device), messages_per_chat)
    row_tokens = padded = 0
    with _autocast_adapter(model, gpu):
        for batch in batches:
            row_tokens += sum(len(r.ids) for r in batch)
            # The backward pass stays inside the kernel choice: gradient checkpointing recomputes attention
            # there, and must pick the same kernel as the forward pass did.
            with prefill_attention.attention_kernels():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=gpu):
                    if packs:
                        packed = learn_packing.pack(batch, device)
                        padded += len(packed)
                        adv = packed.advantages
                        read = functools.partial(packed_token_logprobs, packed=packed, temperature=temperature)
                    else:
                        ids, comp, adv = pad_right(batch, pad_id, device)
                        padded += ids.numel()
                        read = functools.partial(token_logprobs, ids=ids, comp=comp, temperature=temperature)
                    ref = reference_logprobs(model, reference, read) if kl_coef > 0 else None  # [n]
                    logp = read(model)  # [n]
                # On-policy ratio pi/sg(pi) == 1 with gradient grad log pi: the loss reads as in the docstring.
                ratio = torch.exp(logp - logp.detach())
                loss = -(adv * ratio).sum() / n_tokens
                if ref is not None:
                    k3 = kl_k3(logp, ref)  # [n]
                    loss = loss + kl_coef * k3.sum() / n_tokens
                    kl_total += k3.detach().sum()
                loss.backward()
            total += loss.detach()
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:  # nothing read (every advantage 0): the update is AdamW's step on zero gradients, as before
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    distributed.sum_gradients(params)
    total = torch.tensor(distributed.sum_scalar(float(total), device))
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip > 0 else float("inf"))
    norm, total = float(norm), float(total)
    if not math.isfinite(total) or not math.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        raise NonFiniteLoss(f"loss {total}, gradient norm {norm}")
    optimizer.step()
    kl = distributed.sum_scalar(float(kl_total), device) / n_tokens if kl_coef > 0 else None
    return StepStats(loss=total, grad_norm=norm, tokens=n_tokens, samples=len(samples),
                     skipped=len(samples) - len(trained), row_tokens=row_tokens, padded_tokens=padded,
                     microbatches=len(batches), kl=kl)


def kl_k3(logp: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference) at tokens sampled from the policy:
    exp(ref - logp) - (ref - logp) - 1 (>= 0, unbiased, and its gradient pulls logp toward ref). [n] -> [n]."""
    d = ref - logp
    return torch.exp(d) - d - 1


def reference_logprobs(model, reference, read) -> torch.Tensor:
    """`read(model)` under the reference policy, without gradient: the frozen `reference`, or the model with its
    adapter switched off (under LoRA the base is the adapter-free model, so no second copy is held)."""
    with torch.no_grad():
        if reference is not None:
            return read(reference)
        if not hasattr(model, "disable_adapter"):
            raise ValueError("a KL penalty needs a reference: a LoRA model (its adapter switched off) or a "
                             "frozen copy of the base")
        with model.disable_adapter():
            return read(model)
