"""`bench/floor.py` prices work that its counting engine records: that engine must read the prompt tokens a
`StaticEngine` reads (shared runs read once, a session's held tokens not again), write messages at their full
length, and the learner's rows must be counted as the learner reads them."""


import torch
from helpers import bench_script, prompts, tiny

from talktosolve.sampling.engine import Session
from talktosolve.sampling.fast_engine import StaticEngine
from talktosolve.sampling.rollout import Turn

floor = bench_script("floor")


def test_the_counting_engine_reads_what_the_static_engine_reads_over_two_turns():
    common = prompts(97, [20])[0]
    first = [common + p for p in prompts(97, [5, 17, 9, 30])]  # one shared run of 20 tokens, then their own
    extra = prompts(97, [3, 8, 1, 4], seed=2)
    engine = StaticEngine(tiny(), stop_ids=[96], pad_id=0, force_max_length=True)
    counting = floor.Counting(97, [96], slots=0)
    reads = {}
    for name, e in (("static", engine), ("counting", counting)):
        session = Session()
        said = e.generate(first, 7, torch.Generator().manual_seed(0), session=session)
        second = [p + m + x for p, m, x in zip(first, said, extra)]
        e.generate(second, 5, torch.Generator().manual_seed(0), session=session)
        if name == "static":
            total = sum(len(p) for p in first) + sum(len(p) for p in second)
            got = total - session.reused_tokens - engine.shared_tokens
        else:
            got = sum(c["read"] for c in counting.calls)
            assert all(len(m) == 7 and 96 not in m for m in said)
        reads[name] = got
    assert reads["counting"] == reads["static"] == sum(len(p) for p in first) - 3 * 20 + sum(len(x) + 1 for x in extra)


def test_a_message_whose_ids_begin_the_next_view_is_read_inside_it():
    class Chat:
        def __init__(self, turns):
            self.turns = turns

    a1 = Turn("A", [1, 2], [3, 4], "", [], False)
    a2 = Turn("A", [1, 2, 3, 4, 9], [5], "", [], False)  # continues from a1's ids: one row of 6
    b1 = Turn("B", [7], [8], "", [], False)
    b2 = Turn("B", [6, 8], [5, 5], "", [], False)  # does not: two rows, 2 and 4
    rows, messages, squares = floor.learner_tokens([Chat([a1, b1, a2, b2])])
    assert (rows, messages, squares) == (6 + 2 + 4, 2 + 1 + 1 + 2, 36 + 4 + 16)


def test_an_odd_number_of_runs_is_refused_in_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "floor.py"
    out = subprocess.run([sys.executable, str(script), "--model-dir", str(tmp_path), "--gsm8k", str(tmp_path),
                          "--out", str(tmp_path / "f.json"), "--runs", "3"], capture_output=True, text=True)
    assert out.returncode == 1 and out.stderr.strip() == ("--runs needs an even number of at least 2 and "
                                                          "--batch-evals at least 1 (got 3 and 6)")
