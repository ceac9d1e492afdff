"""The fast engine computes what transformers computes: greedy outputs equal stock `generate`'s, sampled
tokens' log-probs equal the learner's, and LoRA weights are merged exactly. On CPU the decode step runs
eagerly (the same tensor program the CUDA graph holds); the GPU-marked test runs the graph through `device`."""

import pytest
import torch
from helpers import interpreted, lora_model, prompts, set_adapter_weights, stock_greedy, tiny

from talktosolve.learning.grpo import Sample, pad_right
from talktosolve.learning.logprobs import token_logprobs
from talktosolve.sampling.fast_engine import StaticEngine


def check_greedy(model, device):
    batch = prompts(97, [5, 17, 9, 30])
    engine = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, force_max_length=True)
    got = engine.generate(batch, 12)
    for p, g in zip(batch, got):
        assert g == stock_greedy(model, p, 12)


def test_greedy_equals_stock_generate_cpu():
    check_greedy(tiny(), "cpu")


def test_lora_weights_are_merged_exactly_and_refreshed():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny(), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    engine = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, force_max_length=True)
    batch = prompts(97, [7, 11])
    got = engine.generate(batch, 8)
    for p, g in zip(batch, got):
        assert g == stock_greedy(model, p, 8)
    q_proj = model.get_base_model().model.layers[0].self_attn.q_proj.base_layer
    w0 = q_proj.weight.detach().clone()
    with torch.no_grad():  # an optimizer step: the sampler must follow on its next call
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05)
    got = engine.generate(batch, 8)
    for p, g in zip(batch, got):
        assert g == stock_greedy(model, p, 8)
    assert torch.equal(q_proj.weight, w0), "the base weight is never modified"
    # A real optimizer step (foreach AdamW, as training runs it) is seen too: the engine skips refreshing only
    # while no parameter's version counter moved.
    lora = [p for n, p in model.named_parameters() if "lora_" in n]
    for p in lora:
        p.grad = torch.randn_like(p)
    torch.optim.AdamW(lora, lr=0.05, foreach=True).step()
    got = engine.generate(batch, 8)
    for p, g in zip(batch, got):
        assert g == stock_greedy(model, p, 8)


def check_logprobs(model, device, atol, lengths=(6, 13, 21), n=10, **engine_options):
    vocab = model.config.vocab_size
    engine = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, force_max_length=True, record_logprobs=True,
                          **engine_options)
    batch = prompts(vocab, lengths)
    gen = torch.Generator(device=device).manual_seed(0)
    outs = engine.generate(batch, n, gen)
    sampler = engine.last_logprobs  # [B, T]
    samples = [Sample(p, o, 0.0, i) for i, (p, o) in enumerate(zip(batch, outs))]
    ids, comp, _ = pad_right(samples, 0, device)
    with torch.no_grad():
        learner = token_logprobs(model, ids, comp).view(len(batch), n)
    torch.testing.assert_close(learner.float(), sampler, atol=atol, rtol=0)


def test_sampler_logprobs_match_learner_cpu():
    check_logprobs(tiny(), "cpu", atol=1e-4)


@pytest.mark.gpu
def test_cuda_graph_engine_matches_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    check_greedy(tiny(device="cuda"), "cuda")
    check_logprobs(tiny(device="cuda", dtype=torch.bfloat16, layers=4), "cuda", atol=0.1)
    check_session(tiny(device="cuda", layers=3))


@pytest.mark.gpu
def test_a_seeded_call_samples_the_same_whether_or_not_its_graph_was_captured_before():
    """Capturing a graph runs warm-up decode steps, which draw random numbers: they must not shift the call's."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    model = tiny(device="cuda")
    engine = StaticEngine(model, stop_ids=[], pad_id=0, temperature=1.0)
    batch = prompts(97, [5, 9, 3, 7])
    first = engine.generate(batch, 12, torch.Generator(device="cuda").manual_seed(7))  # captures its graph
    again = engine.generate(batch, 12, torch.Generator(device="cuda").manual_seed(7))  # replays it
    assert first == again


def check_sampling_kernel(device, rows: int, steps: int, graph: bool):
    """`decode_sampling.sample` over 8 logits: draws advance with the step (in a CUDA graph: at every replay), a
    (seed, step) draws the same again, and the draws follow softmax(z / T) (each frequency within 5 standard
    errors); and a dominant logit is found in any chunk of a longer row."""
    from talktosolve.sampling.decode_sampling import sample

    z = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0, 1.5])
    T = 0.5
    logits = z[None].repeat(rows, 1).to(device, torch.bfloat16)  # z is exact in bf16
    seed = torch.tensor([1234], device=device)
    step = torch.zeros(1, dtype=torch.long, device=device)
    out = torch.zeros(rows, dtype=torch.long, device=device)

    def draw():
        out.copy_(sample(logits, T, seed, step))
        step.add_(1)

    if graph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            draw()  # warm-up outside capture (compiles the kernels)
        torch.cuda.current_stream().wait_stream(stream)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            draw()
        draw = g.replay
    step.zero_()
    draws = []
    for _ in range(steps):
        draw()
        draws.append(out.clone())
    assert not torch.equal(draws[0], draws[1])
    step.zero_()
    draw()
    assert torch.equal(out, draws[0])
    counts = torch.bincount(torch.cat(draws).cpu(), minlength=8).double()
    p = torch.softmax(z.double() / T, 0)
    n = counts.sum()
    assert bool(((counts / n - p).abs() <= 5 * (p * (1 - p) / n).sqrt()).all()), (counts / n, p)
    wide = torch.randn(3, 10_000).to(device)
    for row, col in enumerate((9_000, 5, 4_500)):  # the third, first and second chunk of 4,096
        wide[row, col] = 80.0
    assert sample(wide, 1.0, seed, step).tolist() == [9_000, 5, 4_500]


SAMPLING_SCRIPT = """
import sys
sys.path.insert(0, "tests")  # where pytest finds the helpers
from tests.test_fast_engine import check_sampling_kernel
check_sampling_kernel("cpu", rows=96, steps=4, graph=False)
print("ok")
"""


def test_the_sampling_kernel_draws_from_softmax_over_temperature_and_afresh_at_every_step():
    """Under Triton's interpreter (a CPU): see `check_sampling_kernel`."""
    interpreted(SAMPLING_SCRIPT)


@pytest.mark.gpu
def test_the_sampling_kernel_in_a_cuda_graph_draws_from_softmax_and_afresh_at_every_replay():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    check_sampling_kernel("cuda", rows=4096, steps=10, graph=True)


GROW_SCRIPT = """
import sys
import torch
sys.path.insert(0, "tests")  # where pytest finds the helpers
from helpers import prompts, tiny
from talktosolve.sampling.fast_engine import StaticEngine
engine = StaticEngine(tiny(device="cuda"), stop_ids=[96], pad_id=0, force_max_length=True)
g = torch.Generator(device="cuda").manual_seed(0)
assert len(engine.generate(prompts(97, [5, 6]), 8, g)[0]) == 8  # the process's first capture
assert len(engine.generate(prompts(97, [300, 6]), 8, g)[0]) == 8  # a longer KV: the pool regrows, new graphs
print("ok")
"""


@pytest.mark.gpu
def test_kv_pool_regrows_in_a_fresh_process():
    """The first capture of a process, then a longer prompt (the train loop's turn 0, then turn 1): this once
    failed an allocator assertion, in a fresh process only (where the first capture holds the RNG's tensors)."""
    import subprocess
    import sys
    from pathlib import Path

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", GROW_SCRIPT], cwd=root, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def check_attention_kernel(device, dtype, atol):
    """`decode_attention.attend` against masked softmax attention in fp32, with its default splits, one (no
    combine) and several: left padding (a whole block of it in one row), spans with no column (more splits than
    a row has blocks), a block with no attended column, G not a power of two, one filled column. The padding
    columns hold NaN: a kernel that loaded them would carry NaN into its output (0 x NaN in the value product),
    so equality shows they are never read; with `read_padding=True` (the benchmarks' baseline) and finite
    padding it gives the same attention."""
    from talktosolve.sampling.decode_attention import attend

    g = torch.Generator().manual_seed(0)
    for B, H, G, D, L, n in [(3, 2, 2, 16, 256, 200), (2, 2, 6, 128, 384, 300), (2, 1, 1, 32, 128, 1),
                             (2, 2, 3, 64, 512, 129), (3, 2, 6, 64, 512, 400)]:
        q, k, v = (torch.randn(shape, generator=g).to(device, dtype) for shape in
                   ((B, H, G, D), (B, H, L, D), (B, H, L, D)))
        # row b's tokens begin at column 70 b: its first block may attend nothing, or its first chunk
        first = torch.tensor([min(70 * b, n - 1) for b in range(B)], device=device)
        column = torch.arange(L, device=device)[None]  # [1, L]
        valid = (column >= first[:, None]) & (column < n)
        scores = torch.einsum("bhgd,bhld->bhgl", q.float(), k.float()) * D ** -0.5
        scores = scores.masked_fill(~valid[:, None, None], float("-inf"))
        want = torch.einsum("bhgl,bhld->bhgd", scores.softmax(-1), v.float())
        for splits in (None, 1, 4):
            got = attend(q, k, v, first, torch.tensor([n], device=device), splits=splits, read_padding=True)
            torch.testing.assert_close(got.float(), want, atol=atol, rtol=0)
        padding = (column < first[:, None])[:, None, :, None]  # [B, 1, L, 1]
        k, v = k.masked_fill(padding, float("nan")), v.masked_fill(padding, float("nan"))
        for splits in (None, 1, 2, 16):  # 16: more spans than a short row has blocks (empty spans)
            got = attend(q, k, v, first, torch.tensor([n], device=device), splits=splits)
            assert got.dtype == dtype and got.shape == q.shape
            torch.testing.assert_close(got.float(), want, atol=atol, rtol=0)
    with pytest.raises(ValueError, match="power of two"):
        attend(q, k, v, first, torch.tensor([n], device=device), splits=3)


KERNEL_SCRIPT = """
import sys
import torch
sys.path.insert(0, "tests")  # where pytest finds the helpers
from helpers import lora_model, tiny
from tests.test_fast_engine import check_attention_kernel, check_greedy, check_logprobs, check_session, check_slots
from talktosolve.sampling.fast_engine import StaticEngine
assert StaticEngine(tiny(), stop_ids=[96], pad_id=0).attention_kernel, "the engine should pick the kernel"
check_attention_kernel("cpu", torch.float32, atol=1e-5)
check_greedy(tiny(), "cpu")
check_logprobs(tiny(), "cpu", atol=1e-4)
check_session(tiny(layers=3))
check_slots(lora_model(), "cpu", atol=1e-4)
print("ok")
"""


def test_decode_attention_kernel_under_the_triton_interpreter():
    """The Triton kernels, run on a CPU by Triton's interpreter (in a subprocess: it is chosen at import): the
    attention itself, then the engine using them gives stock `generate`'s greedy tokens and the learner's
    log-probs, with and without a session's reused cache."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[test]' on Linux x86-64)")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", KERNEL_SCRIPT], cwd=root, env=env, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_the_attention_splits_a_row_only_while_the_batch_leaves_sms_idle():
    """`splits_for`: a power of two that brings pairs x splits to the programs it aims at and no further, at most
    MAX_SPLITS, and never more spans than a cache has blocks."""
    from talktosolve.sampling.decode_attention import BLOCK, MAX_SPLITS, PROGRAMS, splits_for

    assert splits_for(64, 1536) == 8  # 32 rows x 2 KV heads
    assert splits_for(384, 1536) == splits_for(1280, 1536) == 1  # a six-run turn's 192 rows, evaluation's 640
    assert splits_for(1, 10**6) == MAX_SPLITS
    assert splits_for(64, 2 * BLOCK) == 2  # a short cache: a block a span at least
    for pairs in (1, 3, 64, 100, 255, 256, 257, 5000):
        for columns in (BLOCK, 300, 1536):
            s = splits_for(pairs, columns)
            assert s & (s - 1) == 0 and 1 <= s <= MAX_SPLITS and (s == 1 or s * BLOCK <= columns)
            assert s == 1 or pairs * s <= PROGRAMS


def test_the_engine_keeps_the_portable_attention_where_the_kernel_cannot_run(monkeypatch):
    from talktosolve.sampling import decode_attention

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not decode_attention.available(torch.device("cpu"), 128)  # no interpreter: a CPU has no Triton kernel
    assert not decode_attention.available(torch.device("cuda"), 80)  # not a power of two
    assert not decode_attention.available(torch.device("cuda"), 8)  # below tl.dot's 16
    assert not StaticEngine(tiny(), stop_ids=[96], pad_id=0).attention_kernel
    with pytest.raises(ValueError, match="head dimension"):
        StaticEngine(tiny(), stop_ids=[96], pad_id=0, attention_kernel=True)


@pytest.mark.gpu
def test_decode_attention_kernel_on_gpu():
    """The kernel in bf16 at the paper model's head shape (G = 6, D = 128) and others, against fp32 attention;
    and in a Qwen-shaped engine (12 heads over 2 KV heads of 128) over prompts of 7 to 1,000 tokens, the
    sampler's log-probs equal the learner's to bf16 tolerance, as with the portable attention; and slot mode
    (three adapters in one graph) holds as on a CPU."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    check_attention_kernel("cuda", torch.bfloat16, atol=2e-2)
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=512, hidden_size=1536, intermediate_size=1024, num_hidden_layers=2,
                      num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096)
    model = Qwen2ForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    # Teacher-forced: the learner scores the very tokens the sampler drew (free-running bf16 outputs of two
    # attention implementations may part at a near-tie and never meet again).
    for kernel in (True, False):
        check_logprobs(model, "cuda", atol=0.1, lengths=(40, 300, 7, 1000), n=40, attention_kernel=kernel)


def test_a_session_reads_only_the_new_tokens_and_changes_nothing():
    check_session(tiny(layers=3))


def check_session(model):
    """A copy's second turn with its first turn's cache gives what a fresh engine reading the whole prompt gives;
    a row whose prompt does not extend what the session holds is read whole."""
    from talktosolve.sampling.engine import Session

    first = prompts(97, [5, 17, 9, 30])
    with_cache = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, record_logprobs=True)
    fresh = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, record_logprobs=True)
    session = Session()
    said = with_cache.generate(first, 7, session=session)
    extra = prompts(97, [3, 8, 1, 4], seed=2)
    second = [p + m + x for p, m, x in zip(first, said, extra)]
    second[2] = [7] + second[2]  # no longer extends what the session holds: read whole
    got = with_cache.generate(second, 9, session=session)
    got_logp = with_cache.last_logprobs
    assert session.reused_tokens == sum(len(p) + len(m) - 1 for i, (p, m) in enumerate(zip(first, said)) if i != 2)
    assert got == fresh.generate(second, 9)
    torch.testing.assert_close(got_logp, fresh.last_logprobs, atol=1e-5, rtol=0)
    for p, g in zip(second, got):  # and both are what transformers computes
        assert g == stock_greedy(model, p, 9)[:len(g)]


def test_play_chats_reuses_each_copys_cache_on_the_micro_model():
    """The micro tokenizer re-reads a message token for token, so every turn after a copy's first is served
    mostly from its cache."""
    from talktosolve.arms import ARMS
    from talktosolve.config import make_config
    from talktosolve.micro.base import load_micro_base
    from talktosolve.micro.task import make_problems
    from talktosolve.model.policy import stop_ids
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.rollout import Player, play_chats

    cfg = make_config("micro")
    protocol = protocol_of(cfg.chat)
    model, tok = load_micro_base()
    engine = StaticEngine(model, stop_ids=stop_ids(tok, model), pad_id=tok.pad_token_id)
    seen = []
    original = engine.generate

    def spy(prompts, n, generator=None, *, session=None):
        before = session.reused_tokens
        out = original(prompts, n, generator, session=session)
        seen.append((sum(len(p) for p in prompts), session.reused_tokens - before))
        return out

    engine.generate = spy
    problems = make_problems("test", 4, seed=0)
    chats = play_chats(problems, ARMS["chat"], {"A": Player(engine, tok), "B": Player(engine, tok)}, protocol,
                       cfg.chat, chats_per_problem=2, seed=0)
    assert len(chats) == 8 and all(len(c.turns) == 4 for c in chats)
    assert seen[0][1] == 0 and seen[1][1] == 0, "a copy's first turn has nothing to reuse"
    for total, reused in seen[2:]:
        assert reused > total / 2, (total, reused)


def check_slots(model, device, atol):
    """Three adapters in one slot-mode engine: each row block samples greedily what its own adapter, merged
    into a single-adapter engine, samples; and the sampler's log-probs equal the learner's under that adapter."""
    vocab = model.config.vocab_size
    runs = 3
    blocks = [prompts(vocab, [5, 17], seed=10 + j) for j in range(runs)]
    slot = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True, slots=runs)
    expected = []
    for j in range(runs):
        set_adapter_weights(model, j)
        slot.store_adapter(j)
        single = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True)
        expected += single.generate(blocks[j], 9)
    got = slot.generate([p for b in blocks for p in b], 9, slots=runs)
    assert got == expected
    slot.release()  # the pool and graphs go; the next call builds them again and samples the same
    assert slot.pool is None and not slot.graphs
    assert slot.generate([p for b in blocks for p in b], 9, slots=runs) == expected
    assert len({tuple(map(tuple, got[2 * j:2 * j + 2])) for j in range(runs)}) == runs, "adapters must differ"
    # Fewer slots than the engine holds: the first n.
    assert slot.generate([p for b in blocks[:2] for p in b], 9, slots=2) == expected[:4]

    sampler = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, force_max_length=True, record_logprobs=True,
                           slots=runs)
    for j in range(runs):
        set_adapter_weights(model, j)
        sampler.store_adapter(j)
    batch = [p for b in blocks for p in b]
    outs = sampler.generate(batch, 7, torch.Generator(device=device).manual_seed(0), slots=runs)
    for j in range(runs):
        set_adapter_weights(model, j)
        rows = range(2 * j, 2 * j + 2)
        samples = [Sample(batch[i], outs[i], 0.0, i) for i in rows]
        ids, comp, _ = pad_right(samples, 0, device)
        with torch.no_grad():
            learner = token_logprobs(model, ids, comp).view(2, 7)
        torch.testing.assert_close(learner.float(), sampler.last_logprobs[2 * j:2 * j + 2], atol=atol, rtol=0)


def test_slot_mode_samples_each_block_through_its_own_adapter_cpu():
    check_slots(lora_model(), "cpu", atol=1e-4)


def test_slot_mode_samples_any_mix_of_rows_each_through_its_slot_or_the_base_cpu():
    model = lora_model()
    vocab = model.config.vocab_size
    batch = prompts(vocab, [5, 9, 6, 7, 4, 8], seed=3)
    adapters = [1, None, 0, 1, None, 0]  # interleaved, unequal counts, base rows among them
    slot = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True, slots=2)
    weights = {}
    for j in (0, 1):
        set_adapter_weights(model, j)
        slot.store_adapter(j)
        weights[j] = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True)
        weights[j] = weights[j].generate(batch, 9)
    with torch.no_grad():  # B = 0: the merged weights are the base's
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.zero_()
    weights[None] = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True
                                 ).generate(batch, 9)
    got = slot.generate(batch, 9, adapters=adapters)
    assert got == [weights[j][i] for i, j in enumerate(adapters)]
    assert len({tuple(weights[j][0]) for j in (0, 1, None)}) == 3, "the three policies must differ"
    with pytest.raises(ValueError, match="adapters="):
        slot.generate(batch, 9, adapters=[0, 1, 2, 0, 1, 0])  # no slot 2


def test_slot_mode_holds_the_base_weights_once_and_leaves_the_model_unchanged():
    model = lora_model()
    set_adapter_weights(model, 0)
    vocab = model.config.vocab_size
    ids = torch.tensor(prompts(vocab, [7, 7], seed=4))
    with torch.no_grad():
        before = model(ids).logits
    engine = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, slots=2)
    for layer, w in zip(model.base_model.model.model.layers, engine.layers):
        at = layer.self_attn
        for name, group, module in (("q", "qkv", at.q_proj), ("k", "qkv", at.k_proj), ("v", "qkv", at.v_proj),
                                    ("o", "o", at.o_proj), ("down", "down", layer.mlp.down_proj)):
            base = module.base_layer
            assert base.weight.untyped_storage().data_ptr() == w[group].weight.untyped_storage().data_ptr(), name
            assert not base.weight.requires_grad
        assert at.q_proj.base_layer.bias.untyped_storage().data_ptr() == w["qkv"].bias.untyped_storage().data_ptr()
    engine.store_adapter(1)  # A goes in under the base rows, never over them
    with torch.no_grad():
        assert torch.equal(model(ids).logits, before)


def test_release_with_weights_frees_the_merged_copies_and_the_next_call_samples_the_same():
    model = lora_model()
    set_adapter_weights(model, 0)
    vocab = model.config.vocab_size
    batch = prompts(vocab, [5, 9, 6], seed=5)
    engine = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True)
    first = engine.generate(batch, 9)
    engine.release(weights=True)
    assert all(w[key].weight is None for w in engine.layers for key in ("qkv", "o", "gate_up", "down"))
    assert not engine.graphs and engine.pool is None
    assert engine.generate(batch, 9) == first
    slot = StaticEngine(model, stop_ids=[vocab - 1], pad_id=0, greedy=True, force_max_length=True, slots=1)
    slot.store_adapter(0)
    before = slot.generate(batch, 9, slots=1)
    slot.release(weights=True)  # slot mode's weights are the base's own storage: they stay
    assert all(w[key].weight is not None for w in slot.layers for key in ("qkv", "o", "gate_up", "down"))
    assert slot.generate(batch, 9, slots=1) == before == first


def test_slot_mode_refuses_what_it_cannot_do():
    engine = StaticEngine(lora_model(), stop_ids=[96], pad_id=0, slots=2)
    batch = prompts(97, [4, 5, 6])
    with pytest.raises(ValueError, match="equal blocks"):
        engine.generate(batch, 3, slots=2)  # 3 rows do not split into 2 blocks
    with pytest.raises(ValueError, match="equal blocks"):
        engine.generate(batch[:2], 3)  # slots missing
    with pytest.raises(ValueError, match="outside"):
        engine.store_adapter(2)
    with pytest.raises(ValueError, match="slot mode"):
        StaticEngine(tiny(), stop_ids=[96], pad_id=0).generate(batch, 3, slots=1)
    with pytest.raises(ValueError, match="LoRA model"):
        StaticEngine(tiny(), stop_ids=[96], pad_id=0, slots=2)
