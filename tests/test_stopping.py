"""A signal stops training after the step in progress, every run's checkpoint saved there (`stopping.py`)."""

import os
import signal

import pytest

from talktosolve.experiment.stopping import Stopped, stop_on_signal


def test_the_first_signal_is_recorded_and_said_and_the_handlers_before_come_back(capsys):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with stop_on_signal() as request:
        assert request.signum is None
        os.kill(os.getpid(), signal.SIGTERM)  # handled in this (the main) thread before the next line runs
        assert request.signum == signal.SIGTERM and request.name == "SIGTERM"
        assert "SIGTERM: training stops when this step ends" in capsys.readouterr().err
        # The first signal gave the handlers back: a second one would act at once.
        assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_handlers_are_restored_when_no_signal_came():
    before = signal.getsignal(signal.SIGINT)
    with stop_on_signal():
        assert signal.getsignal(signal.SIGINT) is not before
    assert signal.getsignal(signal.SIGINT) is before


def test_a_stop_says_where_and_exits_with_128_plus_the_signal():
    with stop_on_signal() as request:
        os.kill(os.getpid(), signal.SIGINT)
    stop = request.stopped(6, 80)
    assert isinstance(stop, KeyboardInterrupt) and stop.code == 130
    assert str(stop) == "stopped by SIGINT after step 6 of 80, every run's checkpoint saved at step 7"
    with pytest.raises(Stopped):
        raise stop
