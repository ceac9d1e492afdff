"""The learner's packed rows (`learn_packing`): a shared run is read once and every trained token is found where
its predicting state sits; through a tiny Qwen2 model with an adapter, packed rows give the padded rows'
log-probs and gradients (through `prefill_attention.reference`, the stand-in for FlashAttention's kernel that a
CPU runs); micro-batches keep to their budget. The GPU-marked test runs FlashAttention itself, forward and
backward, through a whole update."""

import pytest
import torch
from helpers import lora_model, set_adapter_weights

from talktosolve.learning import grpo, learn_packing
from talktosolve.learning.grpo import Sequence
from talktosolve.learning.logprobs import packed_token_logprobs, token_logprobs
from talktosolve.sampling import prefill_attention as pa


def chats(vocab=97, run=20, seed=3):
    """Rows as a step gives them: two problems, each with three rows that begin with the same `run` tokens
    and then differ (a trained message in each, one row with two), and a row sharing nothing."""
    g = torch.Generator().manual_seed(seed)
    tok = lambda n: torch.randint(1, vocab, (n,), generator=g).tolist()
    rows = []
    for problem in range(2):
        view = tok(run)
        for chat in range(3):
            mine = tok(5 + 4 * chat + problem)
            ids = view + mine
            spans = [(run + 2, len(ids), 0.5 - 0.25 * chat)]
            if chat == 2:  # a message inside the shared run's row too: trained tokens from column run - 3
                spans = [(run - 3, run + 1, 0.75)] + [(run + 3, len(ids), -0.5)]
            rows.append(Sequence(ids, spans))
    rows.append(Sequence(tok(11), [(4, 11, 1.0)]))
    return rows


def test_pack_reads_each_shared_run_once_and_finds_every_trained_tokens_predicting_state():
    rows = chats()
    p = learn_packing.pack(rows, "cpu")
    total = sum(len(r.ids) for r in rows)
    assert len(p) == total - 2 * (3 - 1) * 20 == learn_packing.length(rows)
    # Each trained token, in row and span order: its target, and the state before it (same token, same position).
    want_targets, want_before, want_pos = [], [], []
    for r in rows:
        for start, end, _ in r.spans:
            want_targets += r.ids[start:end]
            want_before += r.ids[start - 1:end - 1]
            want_pos += list(range(start - 1, end - 1))
    assert p.targets.tolist() == want_targets
    assert p.ids[p.predict].tolist() == want_before
    assert p.positions[p.predict].tolist() == want_pos
    assert p.advantages.tolist() == [a for r in rows for s, e, a in r.spans for _ in range(s, e)]
    # Segments: the two runs, then every row's rest; a rest's keys are its run's and then its own.
    cu_q, cu_k = p.cu_q.tolist(), p.cu_k.tolist()
    assert len(cu_q) == 2 + len(rows) + 1 and cu_q[2] - cu_q[0] == 40
    keys = p.keys.tolist()
    rest = keys[cu_k[2]:cu_k[3]]  # the first row's segment (its group's run is segment 0 or 1)
    run_start = rest[0]
    assert rest[:20] == list(range(run_start, run_start + 20)) and rest[20:] == list(range(cu_q[2], cu_q[3]))
    assert keys[cu_k[-2]:cu_k[-1]] == list(range(cu_q[-2], cu_q[-1])), "a row in no group reads only itself"
    assert (p.max_q, p.max_k) == (max(b - a for a, b in zip(cu_q, cu_q[1:])), max(b - a for a, b in zip(cu_k, cu_k[1:])))


def test_rows_sharing_fewer_than_the_least_run_are_packed_whole():
    rows = [Sequence([1, 2, 3, 4, 5], [(3, 5, 1.0)]), Sequence([1, 2, 3, 9, 9, 9], [(3, 6, -1.0)])]
    p = learn_packing.pack(rows, "cpu")
    assert p.ids.tolist() == rows[0].ids + rows[1].ids
    assert p.positions.tolist() == list(range(5)) + list(range(6))


def check_packed_equals_padded(device, dtype, kernel, atol):
    rows = chats()
    model = lora_model(device=device, dtype=dtype)
    set_adapter_weights(model, 7, scale=0.1)
    grads = []
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            if packed:
                p = learn_packing.pack(rows, device, kernel)
                logp, adv = packed_token_logprobs(model, p), p.advantages
            else:
                ids, comp, adv = grpo.pad_right(rows, 0, device)
                logp = token_logprobs(model, ids, comp)
        (adv * logp).sum().backward()
        grads.append((logp.detach().float(), {n: q.grad.float() for n, q in model.named_parameters() if q.grad is not None}))
    (want, want_grad), (got, got_grad) = grads
    torch.testing.assert_close(got, want, atol=atol, rtol=0)
    assert set(got_grad) == set(want_grad) and any("k_proj" in n for n in got_grad)
    for n in want_grad:
        scale = want_grad[n].abs().max().item() + 1e-6
        torch.testing.assert_close(got_grad[n] / scale, want_grad[n] / scale, atol=atol, rtol=0, msg=n)


def test_packed_rows_give_the_padded_rows_logprobs_and_gradients():
    check_packed_equals_padded("cpu", torch.float32, pa.reference, atol=1e-5)


def test_packed_microbatches_keep_to_their_budget_and_every_row_once():
    rows = chats()
    batches = learn_packing.microbatches(rows, 60)
    assert sorted(map(id, rows)) == sorted(id(r) for b in batches for r in b)
    assert all(len(b) == 1 or learn_packing.length(b) <= 60 for b in batches)
    # Sorted order keeps a problem's rows together, so the budget that holds one problem packs its run once.
    one = learn_packing.microbatches(rows[:3], learn_packing.length(rows[:3]))
    assert len(one) == 1


def test_packed_microbatches_are_the_greedy_fill_by_packed_length():
    g = torch.Generator().manual_seed(5)
    rows = []
    for problem in range(4):
        view = torch.randint(1, 97, (24 + 6 * problem,), generator=g).tolist()
        for chat in range(5):
            n = int(torch.randint(2, 30, (1,), generator=g))
            ids = view + torch.randint(1, 97, (n,), generator=g).tolist()
            rows.append(Sequence(ids, [(len(view), len(ids), 0.5)]))
    for budget in (40, 90, 150, 400):
        want, batch = [], []  # the definition: rows in sorted order, a batch closed when the next would overflow
        for row in sorted(rows, key=lambda r: r.ids):
            if batch and learn_packing.length(batch + [row]) > budget:
                want.append(batch)
                batch = []
            batch.append(row)
        want.append(batch)
        got = learn_packing.microbatches(rows, budget)
        assert [[id(r) for r in b] for b in got] == [[id(r) for r in b] for b in want]


def test_the_learner_pads_rows_on_a_cpu():
    assert not grpo.packs_rows(lora_model(), "cpu")


def test_the_learner_pads_the_rows_of_a_model_held_in_fp32_even_where_flash_attention_runs(monkeypatch):
    # Its rotary embedding runs in fp32 under autocast, so flash attention would be handed fp32 queries.
    monkeypatch.setattr(grpo.prefill_attention, "available", lambda *args: True)  # as on a GPU that has it
    assert not grpo.packs_rows(lora_model(dtype=torch.float32), "cuda")
    assert grpo.packs_rows(lora_model(dtype=torch.bfloat16), "cuda")


@pytest.mark.gpu
def test_packed_rows_through_flash_attention_give_the_padded_rows_logprobs_and_gradients_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    check_packed_equals_padded("cuda", torch.bfloat16, pa.flash, atol=3e-2)
    assert grpo.packs_rows(lora_model(device="cuda", dtype=torch.bfloat16), "cuda")
