"""The portable sampler (any transformers causal LM, any device): what `chat.engine=portable` and models the
static engine does not know run on."""

import torch
from helpers import prompts, stock_greedy, tiny

from talktosolve.sampling.engine import Engine, Session, cut_at_stop, left_pad
from talktosolve.sampling.factory import make_engine
from talktosolve.sampling.fast_engine import StaticEngine


def test_near_zero_temperature_is_greedy_and_matches_stock_generate():
    model = tiny()
    batch = prompts(97, [5, 17, 9])
    engine = Engine(model, stop_ids=[96], pad_id=0, temperature=1e-4, force_max_length=True)
    got = engine.generate(batch, 10, torch.Generator().manual_seed(0), session=Session())  # session: ignored
    for p, g in zip(batch, got):
        assert g == stock_greedy(model, p, 10)


def test_same_generator_seed_same_samples_and_stops_are_cut():
    model = tiny()
    batch = prompts(97, [4, 11])
    engine = Engine(model, stop_ids=list(range(40, 97)), pad_id=0)  # most tokens stop: messages end early
    a = engine.generate(batch, 12, torch.Generator().manual_seed(3))
    b = engine.generate(batch, 12, torch.Generator().manual_seed(3))
    assert a == b
    for row in a:
        assert all(t < 40 for t in row[:-1]) and len(row) <= 12


def test_make_engine_picks_by_kind():
    model = tiny()
    assert isinstance(make_engine(model, stop_ids=[96], pad_id=0), StaticEngine)
    assert isinstance(make_engine(model, stop_ids=[96], pad_id=0, kind="portable"), Engine)


def test_helpers():
    assert cut_at_stop([[1, 2, 9, 3], [4, 5]], [9]) == [[1, 2, 9], [4, 5]]
    ids, mask = left_pad([[1, 2], [3]], 0, "cpu")
    assert ids.tolist() == [[1, 2], [0, 3]] and mask.tolist() == [[1, 1], [0, 1]]
