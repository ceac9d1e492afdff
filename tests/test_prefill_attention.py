"""Prefill attention over packed rows (`prefill_attention.Packed`) computes what the masked block computes: the
packing finds each row's real queries and prompt columns, the cache writes and attention agree with `Masked`
(through `reference`, the one-row-at-a-time stand-in for FlashAttention's kernel that any device runs), and an
engine prefilling packed samples what one prefilling masked samples, with sessions and shared runs. The
GPU-marked test runs FlashAttention itself."""

import pytest
import torch
from helpers import lora_model, prompts, set_adapter_weights, tiny

from talktosolve.sampling import prefill_attention as pa
from talktosolve.sampling.engine import Session
from talktosolve.sampling.fast_engine import StaticEngine
from talktosolve.sampling.fast_layers import block_mask


def test_pack_finds_each_rows_new_tokens_and_prompt_columns():
    # prompts ending at column T=5 of a cache of L=6 columns and 2 KV heads: row 0 has 2 new tokens and a prompt
    # from column 1, row 1 one new token and a prompt from column 3
    p = pa.pack([2, 1], torch.tensor([1, 3]), 5, 2, 6)
    assert p.rows.tolist() == [0, 0, 1] and p.offsets.tolist() == [0, 1, 0] and p.last.tolist() == [1, 2]
    flat = lambda b, h, col: (b * 2 + h) * 6 + col  # row of a [B * Hkv * L, D] view of the cache
    assert p.dst.tolist() == [flat(0, 0, 3), flat(0, 0, 4), flat(1, 0, 4), flat(0, 1, 3), flat(0, 1, 4), flat(1, 1, 4)]
    keys = [(0, 1), (0, 2), (0, 3), (0, 4), (1, 3), (1, 4)]
    assert p.src.tolist() == [flat(b, h, col) for b, col in keys for h in range(2)]
    assert p.cu_q.tolist() == [0, 2, 3] and p.cu_k.tolist() == [0, 4, 6]
    assert (p.max_q, p.max_k) == (2, 4)


def block(device="cpu", dtype=torch.float32, B=4, Hq=6, Hkv=2, D=16, S=7, T=12, L=16, seed=0):
    """A prefill block's inputs: new q, k, v, caches holding noise everywhere (garbage left of each prompt),
    and rows with new-token counts 7, 3, 1, 5 whose prompts begin at columns 0, 6, 11, 4."""
    g = torch.Generator(device=device).manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, device=device, dtype=dtype)
    n = torch.tensor([7, 3, 1, 5], device=device)[:B]
    first = torch.tensor([0, 6, 11, 4], device=device)[:B]
    real = torch.arange(S, device=device)[None] >= S - n[:, None]
    return r(B, Hq, S, D), r(B, Hkv, S, D), r(B, Hkv, S, D), r(B, Hkv, L, D), r(B, Hkv, L, D), real, first, T


def check_packed_matches_masked(kernel, device, dtype, atol):
    q, k, v, kc, vc, real, first, T = block(device, dtype)
    cols = torch.arange(T, device=device)
    masked = pa.Masked(block_mask(cols[None] >= first[:, None], q.shape[2]), real)
    packed = pa.Packed(pa.pack(real.sum(1).tolist(), first, T, k.shape[1], kc.shape[2]), kernel)
    kc2, vc2 = kc.clone(), vc.clone()
    want = masked(q, k, v, kc, vc)  # [B, S, Hq, D]
    tokens = lambda x: x.transpose(1, 2)[real].transpose(0, 1)[None]  # [B, H, S, D] -> its real tokens [1, H, N, D]
    got = packed(tokens(q), tokens(k), tokens(v), kc2, vc2)  # [1, N, Hq, D]
    torch.testing.assert_close(kc2, kc, atol=0, rtol=0)  # the same columns written, the rest left alone
    torch.testing.assert_close(vc2, vc, atol=0, rtol=0)
    torch.testing.assert_close(got[0], want[real], atol=atol, rtol=0)


def test_packed_attention_writes_and_attends_as_the_masked_block_does():
    check_packed_matches_masked(pa.reference, "cpu", torch.float32, atol=1e-5)


def test_an_engine_prefilling_packed_samples_what_one_prefilling_masked_samples(monkeypatch):
    """Greedy tokens and log-probs over two turns, the second served from a session's cache, with a problem's
    rows sharing their first tokens (a shared run read once)."""
    monkeypatch.setattr(pa, "flash", pa.reference)
    monkeypatch.setattr(pa, "available", lambda *a: True)
    model = tiny(layers=3)
    common = prompts(97, [20])[0]
    first = [common + p for p in prompts(97, [5, 17, 9, 30])]
    extra = prompts(97, [3, 8, 1, 4], seed=2)
    outs = []
    for packed in (True, False):
        engine = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, record_logprobs=True, packed_prefill=packed)
        assert engine.packed_prefill is packed
        session = Session()
        said = engine.generate(first, 7, session=session)
        logp = engine.last_logprobs
        second = [p + m + x for p, m, x in zip(first, said, extra)]
        got = engine.generate(second, 9, session=session)
        assert session.reused_tokens > 0 and engine.shared_tokens > 0
        outs.append((said, logp, got, engine.last_logprobs))
    (s1, l1, g1, m1), (s2, l2, g2, m2) = outs
    assert s1 == s2 and g1 == g2
    torch.testing.assert_close(l1, l2, atol=1e-5, rtol=0)
    torch.testing.assert_close(m1, m2, atol=1e-5, rtol=0)


def test_slot_mode_prefilling_packed_reads_each_token_through_its_rows_slot(monkeypatch):
    monkeypatch.setattr(pa, "flash", pa.reference)
    monkeypatch.setattr(pa, "available", lambda *a: True)
    model = lora_model()
    batch = [prompts(97, [12])[0] + p for p in prompts(97, [5, 9, 6, 7, 4, 8], seed=3)]  # a shared run too
    adapters = [1, None, 0, 1, None, 0]
    outs = []
    for packed in (True, False):
        engine = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, record_logprobs=True, slots=2,
                              packed_prefill=packed)
        for j in (0, 1):
            set_adapter_weights(model, j)
            engine.store_adapter(j)
        outs.append((engine.generate(batch, 9, adapters=adapters), engine.last_logprobs))
    assert outs[0][0] == outs[1][0]
    torch.testing.assert_close(outs[0][1], outs[1][1], atol=1e-5, rtol=0)
    assert len({tuple(outs[0][0][i]) for i in (0, 1, 2)}) == 3, "the three policies must differ"


def test_an_engine_where_flash_attention_cannot_run_prefills_masked_and_refuses_to_be_forced():
    model = tiny()
    assert StaticEngine(model, stop_ids=[96], pad_id=0).packed_prefill is False
    with pytest.raises(ValueError, match="packed_prefill=True needs CUDA with flash attention"):
        StaticEngine(model, stop_ids=[96], pad_id=0, packed_prefill=True)


@pytest.mark.gpu
def test_flash_attention_over_packed_rows_matches_the_masked_block_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    assert pa.available(torch.device("cuda"), torch.bfloat16, 128)
    check_packed_matches_masked(pa.flash, "cuda", torch.bfloat16, atol=2e-2)
