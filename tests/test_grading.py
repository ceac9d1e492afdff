"""Grading: the last boxed answer, exact numbers, math-verify in a worker, bounded time on hostile input."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from talktosolve.task.grading import extract_answer, grade_answer, grade_many, last_boxed, numeric_value

# A hostile comparison may run to the math-verify timeout, then its worker is replaced; allow both plus slack.
TIMEOUT = 1.0
BOUND = 4.0


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def in_thread(fn, *args, **kwargs):
    """Run fn in a non-main thread (math-verify's own SIGALRM timeouts would fail there)."""
    box: dict = {}

    def run():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "grading hung in a thread"
    if "error" in box:
        raise box["error"]
    return box["result"]


# ---- last_boxed ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "text, expected",
    [
        (r"so \boxed{72}", "72"),
        (r"first \boxed{1}, then \boxed{2}", "2"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{a^{b^{c}}} done", "a^{b^{c}}"),
        (r"\boxed {7}", "7"),
        (r"\fbox{8}", "8"),
        (r"\boxed{\{1,2\}}", r"\{1,2\}"),
        (r"\boxed{x}}", "x"),
        (r"\boxed{3} then \boxed{", "3"),  # the last box never closes: the last balanced one counts
        (r"\boxed{a \boxed{b} c}", "b"),  # the last box to open
        (r"no box here, 72", None),
        (r"\boxed{", None),
        ("", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected
    assert extract_answer(text) == expected


def test_last_boxed_not_text():
    assert last_boxed(None) is None  # type: ignore[arg-type]


# ---- numbers -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "boxed, value",
    [
        ("72", "72"), ("72.0", "72"), ("$72", "72"), (r"\$1,000.00", "1000"), (r"\text{72 dollars}", "72"),
        ("1{,}000", "1000"), ("72.", "72"), ("-3", "-3"), ("50\\%", "50"), ("5 kg", "5"), (r"\$ 3.50", "3.5"),
        (r"\frac{1}{2}", None), ("x = 5", None), ("abc", None), ("", None),
    ],
)
def test_numeric_value(boxed, value):
    assert numeric_value(boxed) == value


@pytest.mark.parametrize(
    "final, gold",
    [
        (r"\boxed{72}", "72"), (r"\boxed{72.0}", "72"), (r"\boxed{\$72}", "72"), (r"\boxed{$72$}", "72"),
        (r"\boxed{1,000}", "1000"), (r"\boxed{1000}", "1,000"), (r"\boxed{\$1,000.00}", "1000"),
        (r"\boxed{\text{72 dollars}}", "72"), (r"The answer is \boxed{18}.", "18"), (r"\boxed{0.50}", ".5"),
    ],
)
def test_equal_numbers_fast(final, gold):
    assert grade_answer(final, gold) is True


@pytest.mark.parametrize(
    "final, gold",
    [
        (r"\boxed{73}", "72"), ("72", "72"), ("the answer is 72", "72"), (r"\boxed{}", "72"),
        (r"\boxed{72} no wait \boxed{71}", "72"), (r"\boxed{-72}", "72"), (r"\boxed{7.2}", "72"),
    ],
)
def test_wrong_or_unboxed(final, gold):
    assert grade_answer(final, gold) is False


def test_two_boxes_take_the_last():
    assert grade_answer(r"\boxed{71} no, \boxed{72}", "72") is True


@pytest.mark.parametrize(
    "final, gold, expected",
    [
        (r"\boxed{\frac{1}{2}}", "0.5", True),
        (r"\boxed{\dfrac{3}{4}}", "0.75", True),
        (r"\boxed{10^3}", "1000", True),
        (r"\boxed{x = 72}", "72", True),
        (r"\boxed{\frac{1}{3}}", "0.5", False),
        (r"\boxed{abc}", "72", False),
    ],
)
def test_math_verify_path(final, gold, expected):
    assert grade_answer(final, gold, timeout=5.0) is expected


def test_math_verify_from_a_thread():
    assert in_thread(grade_answer, r"\boxed{\frac{1}{2}}", "0.5", timeout=5.0) is True


def test_overlong_boxed_is_wrong_without_a_look():
    assert grade_answer(r"\boxed{" + "x+" * 1000 + "1}", "1") is False


def test_grade_many_matches_grade_answer():
    finals = [r"\boxed{72}", "no box", r"\boxed{\frac{1}{2}}", r"\boxed{10^3}", r"\boxed{\frac{1}{3}}", r"\boxed{5}"]
    golds = ["72.0", "72", "0.5", "1000", "0.5", "6"]
    expected = [True, False, True, True, False, False]
    assert grade_many(finals, golds, timeout=5.0) == expected
    assert in_thread(grade_many, finals, golds, timeout=5.0) == expected
    assert grade_many([], []) == []
    with pytest.raises(ValueError):
        grade_many(["a"], [])


# ---- hostile input: bounded time -----------------------------------------------------------------------------

HOSTILE = [
    ("{" * 5_000_000, "1"),
    (r"\boxed{" + "{" * 5_000_000, "1"),
    (r"\boxed{" + "{}" * 2_500_000 + "}", "1"),
    (r"\boxed{" * 100_000, "1"),
    (r"\boxed{" * 100_000 + "7" + "}" * 100_000, "7"),
    (r"\boxed{9^{9^{9^{9^{9}}}}}", "1"),
    (r"\boxed{10^{10^{100}}}", "1"),
    (r"\boxed{" + "9" * 5_000 + "}", "1"),
]


@pytest.mark.parametrize("final, gold", HOSTILE, ids=lambda v: repr(v[:24]) if isinstance(v, str) else v)
def test_hostile_bounded(final, gold):
    result, seconds = timed(grade_answer, final, gold, timeout=TIMEOUT)
    assert isinstance(result, bool)
    assert result is (final.endswith("7" + "}" * 100_000))
    assert seconds < BOUND, f"{seconds:.2f}s"


@pytest.mark.parametrize("final, gold", HOSTILE[5:7])
def test_hostile_bounded_in_thread(final, gold):
    result, seconds = timed(in_thread, grade_answer, final, gold, timeout=TIMEOUT)
    assert result is False
    assert seconds < BOUND, f"{seconds:.2f}s"


# Numbers no GSM8K answer comes near, which math-verify would compute exactly: the fast path says wrong at once.
BEYOND = [r"9^{9^{9^{9^{9}}}}", r"10^{10^{100}}", r"9^{9^{9}}", r"2^{2^{2^{2^{2^{2}}}}}", r"10^{10^{10}}",
          r"\left(9^{9}\right)^{9^{9}}", r"1^{9^{9^{9}}}", r"e^{e^{e^{100}}}", r"10^{-10^{100}}", r"10^{9^{9}+1}",
          r"2^{3 \times 10^{3}}", r"(10^{10})!", r"100000!", r"1 \times 10^{99999999}", r"\sqrt{10^{10^{100}}}",
          r"1e99999999", "9" * 500]


@pytest.mark.parametrize("boxed", BEYOND, ids=lambda v: v[:24])
def test_numbers_beyond_any_answer_are_wrong_in_the_bound_with_a_cold_worker(boxed):
    import talktosolve.task.grading as grading

    grading.shutdown_workers()  # a comparison now would have to start a worker first
    result, seconds = timed(grade_answer, rf"\boxed{{{boxed}}}", "1")
    assert result is False
    assert seconds < grading.DEFAULT_TIMEOUT, f"{seconds:.2f}s"
    assert grading._worker is None, "decided without a worker"


# Not beyond any answer, but math-verify computes them for longer than TIMEOUT: each one's worker is killed.
SLOW = [r"\prod_{k=1}^{1000000} k", r"\sum_{k=1}^{100000} k^{k}"]


def test_after_a_timeout_the_grader_still_works():
    assert grade_answer(rf"\boxed{{{SLOW[0]}}}", "1", timeout=TIMEOUT) is False
    assert grade_answer(r"\boxed{\frac{1}{2}}", "0.5", timeout=10.0) is True


def test_a_timeout_does_not_make_the_next_comparison_wait_for_a_worker_to_start():
    import talktosolve.task.grading as grading

    grading.shutdown_workers()
    killed = []
    for slow in SLOW:
        before = grading._worker
        result, seconds = timed(grade_answer, rf"\boxed{{{slow}}}", "1", timeout=TIMEOUT)
        assert result is False and grading._worker is not before, "the comparison timed out, its worker killed"
        killed.append(seconds)
    # The first one waited for the first worker's start; the second found a spare that had started with it.
    assert killed[1] < TIMEOUT + 0.5, f"{killed[1]:.2f}s"


def test_the_worker_outlives_ctrl_c_and_sigterm_sent_to_its_process_group():
    """A stop asked for by a signal lets the trainer finish its step; the worker must still be there to grade it
    (a worker ended mid-comparison grades that answer wrong)."""
    import os
    import signal

    import talktosolve.task.grading as grading

    assert grade_answer(r"\boxed{\frac{1}{2}}", "0.5", timeout=10.0) is True  # a worker, started
    worker = grading._worker
    for sig in (signal.SIGINT, signal.SIGTERM):
        os.kill(worker.proc.pid, sig)
    time.sleep(0.5)
    assert worker.proc.poll() is None, "the worker ended on the signal"
    assert grade_answer(r"\boxed{\sqrt{4}}", "2", timeout=10.0) is True and grading._worker is worker


def test_hostile_batch_keeps_the_rest():
    finals = [r"\boxed{\frac{1}{2}}", r"\boxed{9^{9^{9^{9^{9}}}}}", r"\boxed{\sqrt{4}}", r"\boxed{3}"]
    result, seconds = timed(grade_many, finals, ["0.5", "1", "2", "3"], timeout=TIMEOUT)
    assert result == [True, False, True, True]
    assert seconds < BOUND + 2, f"{seconds:.2f}s"


# ---- properties ------------------------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [r"\boxed{", r"\fbox{", "{", "}", r"\{", r"\}", "\\", "^", "_", r"\frac", r"\sqrt", "72", "1,000", "$", r"\$",
     "%", ".", "-", "x", "=", " ", "dollars", r"\text{", r"\left(", r"\right)", "0.5", "9", "?", "é", "\n"]
)
TEXTS = st.one_of(
    st.text(max_size=200),
    st.lists(FRAGMENTS, max_size=40).map("".join),
    st.lists(FRAGMENTS, max_size=12).map(lambda parts: r"\boxed{" + "".join(parts) + "}"),  # reaches math-verify
)


@settings(max_examples=300, deadline=1000, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_last_boxed_never_crashes(text):
    boxed = last_boxed(text)
    assert boxed is None or (isinstance(boxed, str) and boxed in text)


@settings(max_examples=60, deadline=2 * BOUND * 1000, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS, st.sampled_from(["72", "0.5", "1000", "3"]))
def test_grade_answer_never_crashes(text, gold):
    result, seconds = timed(grade_answer, text, gold, timeout=TIMEOUT)
    assert isinstance(result, bool)
    assert seconds < BOUND


@settings(max_examples=200, deadline=1000)
@given(st.decimals(allow_nan=False, allow_infinity=False, places=2, min_value=-10**6, max_value=10**6))
def test_number_equals_itself_in_any_dress(value):
    plain = format(value, "f")
    assert grade_answer(rf"\boxed{{{plain}}}", plain) is True
    assert grade_answer(rf"\boxed{{\${plain}}}", plain) is True
    if value >= 0:
        assert grade_answer(rf"\boxed{{{value:,.2f}}}", plain) is True


def test_no_math_verify_means_only_numbers_grade(monkeypatch):
    import talktosolve.task.grading as grading

    grading.shutdown_workers()
    monkeypatch.setattr(grading, "_WORKER_SOURCE", "import sys; print('{\"error\": \"no\"}', flush=True)")
    monkeypatch.setattr(grading, "_start_failed", False)
    try:
        assert grade_answer(r"\boxed{\frac{1}{2}}", "0.5") is False
        assert grading._start_failed is True
        assert grade_answer(r"\boxed{72.0}", "72") is True  # the fast path needs no worker
    finally:
        grading.shutdown_workers()
    monkeypatch.undo()
    assert grade_answer(r"\boxed{\frac{1}{2}}", "0.5", timeout=10.0) is True
