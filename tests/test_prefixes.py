"""Shared runs read once: which rows `prefixes.plan` groups, and that an engine reading each group's run once
samples what one reading every row whole samples (greedy tokens and log-probs), alone, in slot mode and with a
session."""

import pytest
import torch
from helpers import lora_model, set_adapter_weights, stock_greedy, tiny

from talktosolve.sampling.engine import Session
from talktosolve.sampling.fast_engine import StaticEngine
from talktosolve.sampling.prefixes import plan

SYSTEM = list(range(1, 41))  # 40 tokens every row begins with


def views(problems=3, chats=4, seed=0, tail=(3, 9)):
    """A second turn's views: the system prompt, a problem (30-50 tokens), then each chat's own message."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for p in range(problems):
        problem = torch.randint(41, 97, (30 + 10 * p,), generator=g).tolist()
        for c in range(chats):
            n = int(torch.randint(tail[0], tail[1], (1,), generator=g))
            out.append(SYSTEM + problem + torch.randint(41, 97, (n,), generator=g).tolist())
    return out


def test_a_problems_chats_share_their_problem_not_only_the_system_prompt():
    rows = views()
    got = plan(rows, [0] * len(rows))
    assert got is not None and len(got.leaders) == 3
    for p in range(3):
        members = range(4 * p, 4 * p + 4)
        assert len({got.group[i] for i in members}) == 1
        assert all(got.shared[i] >= 40 + 30 + 10 * p for i in members)
        lead = got.leaders[got.group[4 * p]]
        assert all(rows[i][:got.shared[i]] == rows[lead][:got.shared[i]] for i in members)


def test_identical_prompts_leave_each_row_its_last_token_to_read():
    rows = [SYSTEM + [50, 60]] * 4
    got = plan(rows, [0] * 4)
    assert got.shared == [len(rows[0]) - 1] * 4 and got.runs == [len(rows[0]) - 1]


def test_rows_of_other_policies_or_with_a_held_cache_are_never_grouped():
    rows = [SYSTEM + [50, 60]] * 8
    got = plan(rows, [0] * 6 + [40, 40], policies=[0, 1, 0, 1, None, None, 0, 0])
    assert got.group[6] == got.group[7] == -1 and got.shared[6] == got.shared[7] == 0  # their caches hold them
    assert got.group[0] == got.group[2] != got.group[1] == got.group[3] != got.group[4] == got.group[5]
    assert plan(rows[:6], [0] * 6, policies=[0, 1, 2, 3, 4, None]) is None


def test_no_plan_when_a_row_outside_every_group_keeps_the_batch_as_long():
    rows = views(problems=1, chats=3) + [list(range(41, 41 + 90))]  # a longer row that shares nothing
    assert plan(rows, [0] * 4) is None
    assert plan([SYSTEM[:10] + [50], SYSTEM[:10] + [51]], [0, 0]) is None, "runs under the least are not shared"


def engines(model, **kw):
    shared = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, record_logprobs=True, **kw)
    whole = StaticEngine(model, stop_ids=[96], pad_id=0, greedy=True, record_logprobs=True, **kw)
    whole.share_prefixes = False
    return shared, whole


def test_reading_shared_runs_once_samples_what_reading_every_row_whole_samples():
    model = tiny(layers=3)
    shared, whole = engines(model)
    rows = views()
    got = shared.generate(rows, 8)
    assert shared.shared_tokens > 0 and whole.shared_tokens == 0
    assert got == whole.generate(rows, 8)
    torch.testing.assert_close(shared.last_logprobs, whole.last_logprobs, atol=1e-5, rtol=0)
    for p, g in zip(rows, got):
        assert g == stock_greedy(model, p, 8)[:len(g)]


def test_shared_runs_in_slot_mode_are_read_through_each_groups_own_adapter():
    model = lora_model(layers=3)
    shared, whole = engines(model, slots=2)
    for j in (0, 1):
        set_adapter_weights(model, j)
        shared.store_adapter(j)
        whole.store_adapter(j)
    rows = views() * 2
    adapters = [0] * 12 + [1, None] * 6  # the same views through adapter 0, then mixed with base rows
    got = shared.generate(rows, 8, adapters=adapters)
    assert shared.shared_tokens > 0
    assert got == whole.generate(rows, 8, adapters=adapters)
    assert got[:12] != got[12:], "the policies write differently"
    torch.testing.assert_close(shared.last_logprobs, whole.last_logprobs, atol=1e-5, rtol=0)


def test_shared_runs_and_a_sessions_held_cache_together_sample_what_whole_prompts_sample():
    """A first turn shared by four chats, then a second turn whose rows extend what the session holds (and one
    that does not, read whole): reuse and sharing combine, and a later fresh engine samples the same."""
    model = tiny(layers=3)
    shared, whole = engines(model)
    first = [SYSTEM + [50 + p] * 20 for p in range(2) for _ in range(4)]
    session = Session()
    said = shared.generate(first, 6, session=session)
    assert shared.shared_tokens == 2 * 3 * (40 + 19)
    assert said == whole.generate(first, 6)
    second = [p + m + [60, 61] for p, m in zip(first, said)]
    second[3] = [7] + second[3]
    got = shared.generate(second, 6, session=session)
    assert got == whole.generate(second, 6)
    torch.testing.assert_close(shared.last_logprobs, whole.last_logprobs, atol=1e-5, rtol=0)


@pytest.mark.gpu
def test_reading_shared_runs_once_on_the_gpu_samples_what_reading_every_row_whole_samples():
    model = tiny(layers=3, device="cuda")
    shared, whole = engines(model)
    rows = views()
    got = shared.generate(rows, 8)
    assert shared.shared_tokens > 0
    assert got == whole.generate(rows, 8)


def _best_partition(rows, least):
    """The most tokens any split of sorted `rows` into consecutive stretches saves, by trying every split."""
    from itertools import product

    from talktosolve.sampling.prefixes import run_between

    runs = [run_between(a, b) for a, b in zip(rows, rows[1:])]
    best = 0
    for cuts in product((False, True), repeat=len(runs)):
        saved, first = 0, 0
        for end in [j + 1 for j, cut in enumerate(cuts) if cut] + [len(rows)]:
            if end - first > 1:
                run = min(runs[first:end - 1])
                saved += (end - first - 1) * run if run >= least else -10**9
            first = end
        best = max(best, saved)
    return best


def test_stretches_grown_row_by_row_save_what_the_best_split_saves():
    from talktosolve.sampling.prefixes import Stretches, run_between

    for seed in range(6):
        rows = sorted(views(problems=2, chats=4, seed=seed))
        stretches, saved = Stretches(least=16), []
        for j, row in enumerate(rows):
            saved.append(stretches.push(run_between(rows[j - 1], row) if j else 0))
            assert saved[-1] == _best_partition(rows[:j + 1], 16)
        p = plan(rows, [0] * len(rows), keep_below=float("inf"))
        assert sum(p.shared) - sum(p.runs) == saved[-1]
