"""What every runnable of the controller is given (app.py builds them): its config, the leader's term, what this
controller sees (leadership), and the clock. A runnable owns none of these; it adds only its own parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.leadership import Leadership
from ha_ops.remediation.term import Term


@dataclass(eq=False)
class Runnable:
    config: ControllerConfig
    term: Term
    leadership: Leadership
    clock: Callable[[], float]
