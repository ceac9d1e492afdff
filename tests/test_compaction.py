"""Rows that do not wait (`sampling.compaction`): a call whose rows have mostly ended decodes on with a smaller
batch, and what it writes does not change: greedy rows and their log-probs are the same, slots stay with their
rows, a kept session serves the next turn as before, and the sampling kernel keys a row's random numbers by its
place in the call, so a seeded call samples the same tokens with and without moving its rows (under Triton's
interpreter on a CPU; on the GPU when marked)."""

import pytest
import torch
from helpers import interpreted, lora_model, prompts, set_adapter_weights, tiny

from talktosolve.sampling import compaction
from talktosolve.sampling.engine import Session
from talktosolve.sampling.fast_engine import StaticEngine


def test_bucket_takes_at_least_a_quarter_off_a_batch_or_leaves_it():
    assert compaction.bucket(60, 192, 16) == 64
    assert compaction.bucket(96, 192, 16) == 96  # 3 x 32
    assert compaction.bucket(200, 384, 16) == 256 and compaction.bucket(193, 384, 16) == 256
    assert compaction.bucket(300, 384, 16) is None  # 384 rows again
    assert compaction.bucket(150, 256, 16) == 192 and compaction.bucket(193, 256, 16) is None  # 256: not a quarter
    assert compaction.bucket(3, 192, 16) == 16  # never below the least batch
    assert compaction.bucket(5, 16, 1) == 6 and compaction.bucket(13, 16, 1) is None
    assert compaction.bucket(1, 2, 1) == 1
    assert [compaction.size_for(n) for n in (0, 1, 2, 3, 4, 5, 7, 9, 13, 100, 129, 193)] == \
        [1, 1, 2, 3, 4, 6, 8, 12, 16, 128, 192, 256]


def test_a_moved_state_fits_the_pool_its_call_sized():
    assert compaction.length(1280, 192, 384) == 2048  # half the rows: the rounded length fits
    assert compaction.length(1280, 256, 384) == 1280  # 256 x 2048 columns would not: the call's own length
    assert compaction.length(1024, 256, 384) == 1024  # a power of two already


def staggered(model, n=16, limit=24, adapters=None, engine=None):
    """`n` prompts and stop ids that end most rows within a few tokens and leave a few writing to `limit`: the
    tokens the rows' greedy continuations write at their third step (none of the last four rows' tokens)."""
    batch = prompts(97, [3 + (5 * i) % 17 for i in range(n)], seed=3)
    engine = engine or StaticEngine(model, stop_ids=[], pad_id=0, greedy=True)
    engine.stop_ids, engine.stop = [], engine.stop[:0]
    engine.compact_rows = False
    full = engine.generate(batch, limit, adapters=adapters)
    late = {t for row in full[-4:] for t in row}
    return batch, sorted({row[2] for row in full[:-4]} - late)


def with_stops(engine, stops):
    engine.stop_ids = stops
    engine.stop = torch.tensor(stops, device=engine.device)
    return engine


class Moves(list):
    """The sizes `compaction.move` moved rows into, while installed."""

    def __enter__(self):
        self.real = compaction.move
        compaction.move = lambda *a, **k: self.append(a[4]) or self.real(*a, **k)
        return self

    def __exit__(self, *exc):
        compaction.move = self.real


def test_greedy_rows_and_their_logprobs_are_the_same_when_the_batch_shrinks():
    model = tiny()
    batch, stops = staggered(model)
    out = {}
    for compact in (True, False):
        e = StaticEngine(model, stop_ids=stops, pad_id=0, greedy=True, record_logprobs=True, compact_rows=compact)
        e.compact_least = 1
        with Moves() as moves:
            out[compact] = (e.generate(batch, 24), e.last_logprobs, moves)
    (moved, logp1, moves), (whole, logp0, none) = out[True], out[False]
    assert moves and not none, "the test's stops did not stagger the rows"
    assert max(map(len, moved)) == 24 and min(map(len, moved)) < 6  # some rows ended early, some wrote on
    assert moved == whole
    for i, row in enumerate(whole):
        assert torch.allclose(logp1[i, :len(row)], logp0[i, :len(row)], atol=1e-5)


def test_calls_of_nearby_lengths_move_their_rows_into_the_same_smaller_states():
    model = tiny()
    batch, stops = staggered(model)
    e = StaticEngine(model, stop_ids=stops, pad_id=0, greedy=True, compact_rows=True)
    e.compact_least = 1
    rows = []
    with Moves() as moves:
        for capacity in (110, 70):  # full-size lengths 128, then 96 (the pool the first sized)
            rows.append(e.generate(batch, 24, capacity=capacity))
    assert moves and rows[0] == rows[1]
    assert {key[1] for key in e.graphs if key[0] == len(batch)} == {96, 128}
    assert sorted(key for key in e.graphs if key[0] < len(batch)) == sorted({(size, 128) for size in moves})


def test_the_graph_dropped_when_too_many_are_kept_is_the_least_recently_used(monkeypatch):
    monkeypatch.setattr("talktosolve.sampling.fast_engine.MAX_GRAPHS", 2)
    e = StaticEngine(tiny(), stop_ids=[], pad_id=0, greedy=True)
    batch = prompts(97, [3, 5], seed=1)
    for capacity in (96, 64, 96, 32):  # the first sizes the pool: no call regrows it (which drops every graph)
        e.generate(batch, 4, capacity=capacity)
    assert list(e.graphs) == [(2, 96), (2, 32)]


def test_a_moved_row_keeps_its_slot():
    model = lora_model()
    e = StaticEngine(model, stop_ids=[], pad_id=0, greedy=True, slots=2, record_logprobs=True)
    for slot, seed in ((0, 1), (1, 2)):
        set_adapter_weights(model, seed)
        e.store_adapter(slot)
    adapters = [(None, 0, 1)[i % 3] for i in range(16)]
    batch, stops = staggered(model, adapters=adapters, engine=e)
    with_stops(e, stops).compact_least = 1
    runs = []
    for compact in (True, False):
        e.compact_rows = compact
        with Moves() as moves:
            runs.append((e.generate(batch, 24, adapters=adapters), len(moves), e.last_logprobs))
    assert runs[0][1] and not runs[1][1]
    assert runs[0][0] == runs[1][0]
    for i, row in enumerate(runs[0][0]):  # a row read through another slot would show in its log-probs
        torch.testing.assert_close(runs[0][2][i, :len(row)], runs[1][2][i, :len(row)], atol=1e-5, rtol=0)


@pytest.mark.parametrize("limit", [24, 3])
def test_a_session_kept_through_moves_serves_the_next_turn_as_the_whole_batch_would(limit):
    """A copy's turn whose rows move still leaves every row's K/V with its session: the next turn reads only its
    new tokens and writes what a fresh engine reading every prompt whole writes, and what the turn gives without
    moving. At a limit of 3 the rows that ended before the move (the longest prompts among them) hold more columns
    than any row's prompt and message: the session keeps each row's own."""
    model = tiny()
    batch, stops = staggered(model)
    said, second = {}, {}
    for compact in (True, False):
        e = with_stops(StaticEngine(model, stop_ids=[], pad_id=0, greedy=True, compact_rows=compact,
                                    record_logprobs=True), stops)
        e.compact_least = 1
        session = Session()
        with Moves() as moves:
            said[compact] = e.generate(batch, limit, session=session)
        assert bool(moves) == compact
        extra = prompts(97, [2 + i % 5 for i in range(len(batch))], seed=4)
        turn = [p + m + x for p, m, x in zip(batch, said[compact], extra)]
        session.keep = False  # the copy's last turn
        second[compact] = e.generate(turn, 12, session=session)
        assert session.reused_tokens == sum(len(p) + len(m) - 1 for p, m in zip(batch, said[compact]))
        fresh = with_stops(StaticEngine(model, stop_ids=[], pad_id=0, greedy=True, compact_rows=False,
                                        record_logprobs=True), stops)
        assert second[compact] == fresh.generate(turn, 12)
        for i, row in enumerate(second[compact]):  # the log-probs see any K/V gone astray; greedy tokens may not
            torch.testing.assert_close(e.last_logprobs[i, :len(row)], fresh.last_logprobs[i, :len(row)], atol=1e-5,
                                       rtol=0)
    assert said[True] == said[False] and second[True] == second[False]


KERNEL_SCRIPT = """
import sys
sys.path.insert(0, "tests")
from test_compaction import check_kernel_keys_rows, check_seeded_call_samples_the_same
check_kernel_keys_rows("cpu")
check_seeded_call_samples_the_same("cpu")
print("ok")
"""


def check_kernel_keys_rows(device):
    """A row draws the same numbers wherever it sits in the batch: sampling rows 5, 2 and 9 of a batch alone, keyed
    by their places, gives what the whole batch gave them."""
    from talktosolve.sampling.decode_sampling import sample

    logits = torch.randn(12, 50, generator=torch.Generator().manual_seed(0)).to(device)
    seed = torch.tensor([99], device=device)
    step = torch.tensor([3], device=device)
    whole = sample(logits, 1.0, seed, step)
    rows = torch.tensor([5, 2, 9], device=device)
    assert sample(logits[rows].contiguous(), 1.0, seed, step, rows).tolist() == whole[rows].tolist()
    assert sample(logits[rows].contiguous(), 1.0, seed, step).tolist() != whole[rows].tolist()


def check_seeded_call_samples_the_same(device):
    """With the sampling kernel, a seeded call samples the same tokens whether or not its rows move."""
    model = tiny(device=device)
    batch, stops = staggered(model)
    out = []
    for compact in (True, False):
        e = StaticEngine(model, stop_ids=stops, pad_id=0, temperature=1.0, compact_rows=compact)
        e.sampling_kernel = True  # on a CPU, under Triton's interpreter
        e.compact_least = 1
        with Moves() as moves:
            out.append((e.generate(batch, 24, torch.Generator(device=device).manual_seed(5)), len(moves)))
    assert out[0][1] and not out[1][1], "the rows never moved"
    assert out[0][0] == out[1][0]


def test_the_sampling_kernel_keys_each_row_by_its_place_in_the_call():
    """Under Triton's interpreter (a CPU): `check_kernel_keys_rows` and `check_seeded_call_samples_the_same`."""
    interpreted(KERNEL_SCRIPT, timeout=900)


@pytest.mark.gpu
def test_rows_move_without_changing_what_a_call_samples_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    check_kernel_keys_rows("cuda")
    check_seeded_call_samples_the_same("cuda")


def test_whole_chats_on_the_micro_model_are_the_same_when_rows_move():
    """Four turns of 8 chats on the micro base through the rollout (each copy's session carried from turn to
    turn), decoded greedily: every message is the same whether or not each turn's rows move."""
    from talktosolve.arms import ARMS
    from talktosolve.config import make_config
    from talktosolve.micro.base import load_micro_base
    from talktosolve.micro.task import make_problems
    from talktosolve.model.policy import stop_ids
    from talktosolve.protocol import protocol_of
    from talktosolve.sampling.rollout import Player, play_chats

    cfg = make_config("micro")
    model, tok = load_micro_base()
    problems = make_problems("test", 4, seed=0)
    texts = {}
    for compact in (True, False):
        engine = StaticEngine(model, stop_ids=stop_ids(tok, model), pad_id=tok.pad_token_id, greedy=True,
                              compact_rows=compact)
        engine.compact_least = 1
        with Moves() as moves:
            chats = play_chats(problems, ARMS["chat"], {"A": Player(engine, tok), "B": Player(engine, tok)},
                               protocol_of(cfg.chat), cfg.chat, chats_per_problem=2, seed=0)
        texts[compact] = [[t.completion_ids for t in c.turns] for c in chats]
        assert bool(moves) == compact
    assert texts[True] == texts[False]



def test_moved_rows_keep_their_kv_layer_by_layer_in_place_and_gathered_whole():
    """A state of 16 rows and 160 columns (not a power of two) moves twice: into 12 rows that keep the call's own
    length (the rounded 256 would not fit the pool the call sized), layer by layer in place; then into 8 rows of 256
    columns, a layer of which is larger than a layer of the state it leaves, so gathered whole first. Every row
    still writing keeps its K/V, column for column."""
    e = StaticEngine(tiny(layers=3), stop_ids=[96], pad_id=0, compact_rows=True)
    s = e._graph(16, 160)
    filled = 100
    for key in ("k", "v"):
        s[key].copy_(torch.randn(s[key].shape, generator=torch.Generator().manual_seed(len(key))))
    want = {key: s[key][:, :, :, :filled].clone() for key in ("k", "v")}
    written = compaction.Written(16, record_logprobs=False)
    s["done"][[0, 5, 9, 14]] = True
    t = compaction.move(e, s, written, 3, 12, 160, filled)
    assert (t["k"].shape[1], t["k"].shape[3]) == (12, 160)  # in place: a layer of 12 x 160 fits one of 16 x 160
    t["done"][[1, 2, 3, 10]] = True
    u = compaction.move(e, t, written, 4, 8, 160, filled)
    assert (u["k"].shape[1], u["k"].shape[3]) == (8, 256)  # 8 x 256 is more than 12 x 160: gathered whole
    left = [1, 6, 7, 8, 10, 11, 12, 15]  # of the 12 (1, 2, 3, 4, 6, 7, 8, 10, 11, 12, 13, 15), places 1-3 and 10 ended
    assert written.order == left
    for key in ("k", "v"):
        assert torch.equal(u[key][:, :len(left), :, :filled], want[key][:, left])
