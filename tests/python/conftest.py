"""Helpers shared by the Python tests."""

import os
import signal
import threading
import time

import pytest


class CtrlC:
    """Sends SIGINT to this process once ``ready()`` holds, ``after`` seconds
    after the start at the earliest, from a thread of its own; ``latency()``
    is then the time from the signal to the call of ``latency``."""

    def __init__(self, after: float = 0.0, ready=lambda: True):
        self.sent = None
        self._thread = threading.Thread(target=self._fire, args=(after, ready), daemon=True)
        self._thread.start()

    def _fire(self, after, ready):
        started = time.monotonic()
        while time.monotonic() - started < 60:
            if time.monotonic() - started >= after and ready():
                self.sent = time.monotonic()
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.005)

    def latency(self) -> float:
        stopped = time.monotonic()
        self._thread.join()
        assert self.sent is not None, "the signal was never sent"
        return stopped - self.sent


@pytest.fixture
def ctrl_c():
    """``ctrl_c(after=..., ready=...)`` starts a :class:`CtrlC`."""
    return CtrlC
