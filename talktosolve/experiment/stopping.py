"""A stop asked for by a signal: training ends after the step in progress, with every run's checkpoint there.

A machine lent for a fixed time (a preemptible instance, a batch job's wall clock) sends SIGTERM before it takes
the process back, and Ctrl-C sends SIGINT. Without this, either loses every step since the last checkpoint
(`train.checkpoint_every` apart). Inside `stop_on_signal`, the first of them only sets a flag; the training loop
reads it after each step, saves every run's checkpoint at that step and raises `Stopped`, so rerunning the same
command goes on from there; after the last step, once every run's final weights are saved, it raises `Stopped` too,
so what follows training (a recipe's evaluations) waits for the rerun. The first signal also gives the handlers
back, so a second one acts at once, as without this (SIGINT raises KeyboardInterrupt, SIGTERM ends the process).
Processes training together (`torchrun`) stop at the same step: each step they agree whether any of them was asked.

Handlers can only be set in the main thread; elsewhere nothing is caught. No torch here.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stopped(KeyboardInterrupt):
    """Training stopped at a step's end on a signal, each run's checkpoint saved there. A KeyboardInterrupt, as
    the stop a user asked for: the CLI prints the message and exits with 128 + the signal's number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.code = 128 + signum


class StopRequest:
    """The first signal received inside `stop_on_signal` (None while there was none)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""

    def stopped(self, step: int, steps: int) -> Stopped:
        """The exception to raise after step `step` (of `steps`), every run's checkpoint saved at `step + 1`."""
        return Stopped(f"stopped by {self.name} after step {step} of {steps}, every run's checkpoint saved at step "
                       f"{step + 1}", self.signum or signal.SIGINT)

    def finished(self, steps: int) -> Stopped:
        """The exception to raise when the signal came in the last of `steps` steps: every run is finished."""
        return Stopped(f"stopped by {self.name} after the last step ({steps - 1} of {steps}), every run finished and "
                       "saved; nothing after training was started", self.signum or signal.SIGINT)


@contextmanager
def stop_on_signal(signals=SIGNALS) -> Iterator[StopRequest]:
    """Within, the first of `signals` is recorded in the request yielded, not acted on; the handlers in place
    before are restored then, and on leaving."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    before = {s: signal.getsignal(s) for s in signals}

    def restore() -> None:
        for s, handler in before.items():
            signal.signal(s, handler)

    def record(signum, frame) -> None:
        request.signum = signum
        restore()
        print(f"\n{request.name}: training stops when this step ends, every run's checkpoint saved there; send it "
              "again to stop at once", file=sys.stderr, flush=True)

    for s in signals:
        signal.signal(s, record)
    try:
        yield request
    finally:
        restore()
