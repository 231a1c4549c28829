"""The final-save request: SIGTERM (Kubernetes, Slurm at the time limit) and SIGUSR1 (Slurm's `--signal=USR1@60`).

The handler only sets a flag. A signal arrives between two Python bytecodes, possibly in the middle of a save or a
collective; doing I/O there could tear the checkpoint or deadlock the ranks. The job's loop checks the flag
(`Checkpointer.should_save()`) at its next safe point, saves once more, and exits.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterable
from types import FrameType
from typing import Any

DEFAULT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)


class FinalSaveFlag:
    """Set by a signal handler, read by the job's loop."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None
        self._previous: dict[signal.Signals, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def request(self, signum: signal.Signals) -> None:
        if self.signal is None:
            self.signal = signum

    def install(self, signals: Iterable[signal.Signals] = DEFAULT_SIGNALS) -> None:
        """Install the handlers (main thread only, as Python requires). A previous Python handler is chained."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("signal handlers can only be installed from the main thread")
        for sig in signals:
            if sig not in self._previous:  # installing twice must not record our own handler as the previous one
                self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        sig = signal.Signals(signum)
        self.request(sig)
        previous = self._previous.get(sig)
        # chain only a Python handler: SIG_DFL for SIGTERM would end the process before the final save
        if callable(previous) and getattr(previous, "__self__", None) is not self:
            previous(signum, frame)
