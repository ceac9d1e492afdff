"""Grading a copy's final answer against the gold answer: the LAST `\\boxed{...}` only, bounded time.

Rules (the team reward is the mean of the two copies' grades):

* The answer is the content of the last `\\boxed{...}` (also `\\boxed {...}` and `\\fbox{...}`) whose braces
  balance; escape pairs (`\\{`, `\\}`, `\\\\`) are not braces. If the last box never closes, the last one that
  does counts. No balanced box -> wrong. Linear time (vectorised brace depth), whatever the input.
* Fast exact path: if the boxed content, once cleaned, is a plain decimal number (optional `-`), it is compared
  with the gold, cleaned the same way, as a `Decimal` (so 72 = 72.0 = $72 = \\$72.00 and 1,000 = 1000). Cleaning
  unwraps `\\text{..}`, `\\textbf{..}`, `\\mathrm{..}`, `\\mbox{..}`, removes `$`, `\\$`, `%`, `\\%`, LaTeX spaces, a
  leading `=`, thousands commas (`1,000`, `1{,}000`), trailing words after the number (units: `72 dollars`,
  `5 kg`) and a trailing `.`.
* Magnitude fast path: content holding a number whose magnitude passes 10^100 or falls below 10^-100 (a power,
  a factorial, a scientific numeral, a long run of digits: `talktosolve.task.magnitude`) is wrong without a look. No
  GSM8K answer comes near, and math-verify (sympy) can spend seconds, or forever, computing `9^{9^{9^{9^9}}}`
  or `10^{10^{100}}` exactly; so these never wait for a worker, not even for its start.
* Anything else goes to math-verify: `verify(parse("$" + gold + "$"), parse("\\boxed{" + content + "}"))`, with
  its own SIGALRM timeouts switched off (`parsing_timeout=None`, `timeout_seconds=None`): SIGALRM only works on
  the main thread. Time is bounded here instead: boxed content (or gold) over `MAX_BOXED_CHARS` is wrong without
  a look, and math-verify runs in a worker process (`python -c`, importing only math-verify); a comparison that
  takes longer than `timeout` seconds is wrong and its worker is killed. A spare worker, started with the first
  and after every kill, takes the killed one's place, so the next comparison does not wait for a start (unless
  kills come faster than a worker starts); only a process's first comparison waits for the first worker to
  import math-verify. A worker that cannot start (math-verify missing) makes every non-numeric answer wrong,
  with one warning. Any thread.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import re
import subprocess
import sys
import threading
from decimal import Decimal

import numpy as np

from talktosolve.task.magnitude import beyond_any_answer
from talktosolve.task.numbers import canonical

log = logging.getLogger(__name__)

MAX_BOXED_CHARS = 1000  # longer boxed content is wrong without a look: no GSM8K answer is this long
DEFAULT_TIMEOUT = 2.0  # seconds for one math-verify comparison
STARTUP_TIMEOUT = 60.0  # seconds for a fresh worker to import math-verify (slow disks, cold caches)
RECYCLE_AFTER = 5000  # comparisons before a worker is replaced (math-verify's caches grow without bound)

# `\\boxed` / `\\fbox`, optional spaces, then the opening brace.
_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")

_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mbox|textrm)\s*\{([^{}]*)\}")
_SPACES = re.compile(r"\\[,;:! ]|~|\\quad|\\qquad|\s+")
_UNITS = re.compile(r"(?<=[\d.])\s*[A-Za-z][A-Za-z\s.]*$")
_PLAIN_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def last_boxed(text: str) -> str | None:
    """Content of the last balanced `\\boxed{...}` / `\\fbox{...}` in `text`, or None. Linear time."""
    if not isinstance(text, str) or "\\" not in text:
        return None
    # Escape pairs (`\\\\`, `\\{`, `\\}`) become spaces, left to right as TeX reads them, keeping every index.
    plain = text.replace("\\\\", "  ").replace("\\{", "  ").replace("\\}", "  ")
    starts = [m.end() for m in _BOX_START.finditer(plain)]  # index just inside each box's opening brace
    if not starts:
        return None
    # Brace depth before every index, vectorised: a Python loop over megabytes of `{}{}` takes seconds. A box that
    # opens at depth d (just inside it) closes at the first later index where the depth falls to d - 1.
    points = np.frombuffer(plain.encode("utf-32-le", errors="replace"), dtype="<u4")
    step = (points == 123).astype(np.int8) - (points == 125).astype(np.int8)
    depth = np.zeros(len(points) + 1, dtype=np.int32)
    np.cumsum(step, dtype=np.int32, out=depth[1:])
    lowest_after = np.minimum.accumulate(depth[::-1])[::-1]  # lowest_after[i] = min(depth[i:])
    for start in reversed(starts):
        target = depth[start] - 1
        if start < len(points) and lowest_after[start + 1] <= target:
            close = start + int(np.argmax(depth[start + 1 :] <= target))  # the `}` that brings depth to target
            return text[start:close]
    return None


def extract_answer(final_message: str) -> str | None:
    """The boxed answer of a final message (for transcripts), or None."""
    return last_boxed(final_message)


def numeric_value(answer: str) -> str | None:
    """Canonical decimal value of a boxed answer that is a plain number after cleaning (see module doc), else None."""
    if not isinstance(answer, str) or len(answer) > MAX_BOXED_CHARS:
        return None
    text = answer.replace("\u2212", "-")
    for _ in range(3):  # nested wrappers such as \text{\textbf{72}}
        text = _WRAPPER.sub(r"\1", text)
    text = text.replace("\\$", "").replace("$", "").replace("\\%", "").replace("%", "").replace("{,}", ",")
    text = _SPACES.sub(" ", text).strip()
    text = text.lstrip("=").strip()
    text = _UNITS.sub("", text).strip().rstrip(".").strip().replace(" ", "")
    if not _PLAIN_NUMBER.fullmatch(text):
        return None
    return canonical(text)


def _fast(boxed: str, gold: str) -> bool | None:
    """Exact decision when both sides are plain numbers; None when math-verify must decide."""
    mine, theirs = numeric_value(boxed), numeric_value(gold)
    if mine is None or theirs is None:
        return None
    return Decimal(mine) == Decimal(theirs)


# ---- the math-verify worker -------------------------------------------------------------------------------------
# A separate interpreter started with `python -c`: it imports only math-verify (not this package, not torch, not the
# caller's __main__), so there is no fork-after-torch and no re-run of an unguarded script as with `spawn`.
# It ignores SIGINT and SIGTERM: Ctrl-C or a SIGTERM to the process group would otherwise end it mid-comparison
# (graded wrong) while the trainer finishes its step to stop there; it ends when its input closes or is killed.
_WORKER_SOURCE = r"""
import json, logging, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
logging.disable(logging.WARNING)
try:
    from math_verify import parse, verify
except Exception as exc:
    print(json.dumps({"error": repr(exc)}), flush=True)
    sys.exit(1)
sys.setrecursionlimit(10000)
try:  # warm the LaTeX parser and sympy's first paths before saying ready
    verify(parse("$0.5$", parsing_timeout=None), parse("\\boxed{\\frac{1}{2}}", parsing_timeout=None), timeout_seconds=None)
except Exception:
    pass
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    try:
        pred, gold = json.loads(line)
        gold_parsed = parse("$" + gold.strip().strip("$") + "$", parsing_timeout=None)
        pred_parsed = parse("\\boxed{" + pred + "}", parsing_timeout=None)
        ok = bool(gold_parsed and pred_parsed and verify(gold_parsed, pred_parsed, timeout_seconds=None))
    except BaseException:
        ok = False
    print(json.dumps(ok), flush=True)
"""


class _Worker:
    """One math-verify process, a thread reading its replies, and how many comparisons it has done.

    Starting one does not wait for it. A spare is started with the first worker and after every kill, so a
    killed worker's place is taken at once by one that has been importing math-verify meanwhile.
    """

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_SOURCE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, encoding="utf-8", bufsize=1,
        )
        self.lines: queue.Queue = queue.Queue()
        self.used = 0
        self.ready = False
        # A reader thread makes a timed read work on every platform (select() on pipes is POSIX only).
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # EOF: the worker died

    def get(self, timeout: float):
        """The next reply, or raises TimeoutError / EOFError."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None
        if line is None:
            raise EOFError
        return json.loads(line)

    def wait_ready(self) -> None:
        if not self.ready:
            try:
                first = self.get(STARTUP_TIMEOUT)
            except (TimeoutError, EOFError, ValueError) as exc:
                first = exc
            if not isinstance(first, dict) or not first.get("ready"):
                self.kill()
                raise RuntimeError(f"math-verify worker did not start: {first!r}")
            self.ready = True

    def kill(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # already gone
            pass


_lock = threading.Lock()
_worker: _Worker | None = None
_spare: _Worker | None = None
_start_failed = False


def _next_worker() -> _Worker:
    """The spare (started with the worker before, so it has had time to import math-verify), or a fresh worker
    if there is none yet; a new spare starts behind it."""
    global _spare
    worker = _spare or _Worker()
    _spare = _Worker()
    return worker


def _replace_worker() -> None:
    """Kill the current worker (if any) and put the spare in its place."""
    global _worker
    if _worker is not None:
        _worker.kill()
    _worker = _next_worker()


def shutdown_workers() -> None:
    """Stop the grading worker processes (the next comparison starts a fresh one)."""
    global _worker, _spare
    with _lock:
        for w in (_worker, _spare):
            if w is not None:
                w.kill()
        _worker = _spare = None


atexit.register(shutdown_workers)


def _verify_pairs(pairs: list[tuple[str, str]], timeout: float) -> list[bool]:
    """math-verify on (boxed content, gold) pairs in the worker, each bounded by `timeout` seconds."""
    global _worker, _start_failed
    results = [False] * len(pairs)
    with _lock:  # one caller at a time talks to the worker
        i = 0
        while i < len(pairs):
            if _start_failed:
                return results  # no math-verify here: only the fast path can say True
            try:
                if _worker is None:
                    _worker = _next_worker()
                _worker.wait_ready()
            except Exception as exc:
                _worker = None
                _start_failed = True
                log.warning("math-verify unavailable, non-numeric answers grade as wrong: %s", exc)
                return results
            # Pipeline the rest of the batch; on a timeout the worker is replaced and the rest is sent again.
            pending = range(i, len(pairs))
            try:
                _worker.proc.stdin.write("".join(json.dumps(pairs[j]) + "\n" for j in pending))
                _worker.proc.stdin.flush()
            except OSError:  # the worker died: count nothing, start afresh
                _replace_worker()
                continue
            for j in pending:
                try:
                    results[j] = _worker.get(timeout) is True
                except (TimeoutError, EOFError, ValueError):
                    _replace_worker()
                    i = j + 1  # this pair is wrong; the rest go to the fresh worker
                    break
                _worker.used += 1
                i = j + 1
            if _worker.used >= RECYCLE_AFTER:
                _replace_worker()
    return results


def _needs_worker(final_message: str, gold: str) -> tuple[bool | None, str | None]:
    """(decision, boxed) where decision is known without math-verify, else (None, boxed content)."""
    if isinstance(gold, (int, float, Decimal)) and not isinstance(gold, bool):
        gold = str(gold)  # a gold number passed as a number, not text
    boxed = last_boxed(final_message)
    if boxed is None or not isinstance(gold, str) or not boxed.strip():
        return False, None
    fast = _fast(boxed, gold)
    if fast is not None:
        return fast, boxed
    if len(boxed) > MAX_BOXED_CHARS or len(gold) > MAX_BOXED_CHARS or beyond_any_answer(boxed):
        return False, boxed
    return None, boxed


def grade_answer(final_message: str, gold: str, *, timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Whether the last boxed answer of `final_message` equals `gold` (see module doc). Bounded time, any thread."""
    decision, boxed = _needs_worker(final_message, gold)
    if decision is not None:
        return decision
    return _verify_pairs([(boxed, gold)], timeout)[0]


def grade_many(finals: list[str], golds: list[str], *, timeout: float = DEFAULT_TIMEOUT) -> list[bool]:
    """`grade_answer` over pairs: the fast path inline, the leftovers sent to math-verify as one batch."""
    if len(finals) != len(golds):
        raise ValueError(f"grade_many: {len(finals)} final messages but {len(golds)} gold answers")
    out: list[bool] = []
    left: list[int] = []
    pairs: list[tuple[str, str]] = []
    for k, (final, gold) in enumerate(zip(finals, golds)):
        decision, boxed = _needs_worker(final, gold)
        out.append(bool(decision))
        if decision is None:
            left.append(k)
            pairs.append((boxed, gold))
    if pairs:
        for k, ok in zip(left, _verify_pairs(pairs, timeout)):
            out[k] = ok
    return out
