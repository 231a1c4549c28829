"""Slurm through its commands (scontrol, sinfo, squeue), each with a timeout and bounded retries.

Slurm's own clients retry for 1.5 x SlurmctldTimeout and hang on a frozen controller, so every call here is
wrapped in our own timeout (shared/LAB-NOTES.md).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ha_ops.errors import CommandFailed, CommandTimeout, TransportError
from ha_ops.transport.base import Transport
from ha_ops.util.proc import CommandResult

log = logging.getLogger(__name__)

# Reasons ha-ops writes start with this, so that it only ever resumes nodes it drained itself.
REASON_PREFIX = "ha-ops:"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # e.g. IDLE, ALLOCATED, IDLE+DRAIN, DOWN*+DRAIN
    reason: str

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state

    @property
    def drained_by_ha_ops(self) -> bool:
        return self.drained and self.reason.startswith(REASON_PREFIX)


class Slurm:
    def __init__(self, transport: Transport, timeout: float = 10.0, retries: int = 2, retry_wait: float = 0.5) -> None:
        self.transport = transport
        self.timeout = timeout
        self.retries = retries
        self.retry_wait = retry_wait

    def _run(self, argv: list[str]) -> CommandResult:
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                return self.transport.run(argv, timeout=self.timeout)
            except (CommandTimeout, CommandFailed) as exc:
                last = exc
                log.debug("%s failed (attempt %d): %s", argv[0], attempt + 1, exc)
                if attempt < self.retries:
                    time.sleep(self.retry_wait)
        assert last is not None
        raise last

    def node(self, name: str) -> SlurmNode:
        out = self._run(["scontrol", "show", "node", "-o", name]).stdout
        fields: dict[str, str] = {}
        # One line of Key=Value pairs; Reason= runs to the end of its value, which may contain spaces.
        if " Reason=" in out:
            out, reason = out.split(" Reason=", 1)
            fields["Reason"] = reason.strip()
        for token in out.split():
            key, _, value = token.partition("=")
            fields[key] = value
        if fields.get("NodeName") != name:
            raise TransportError(f"scontrol did not describe node {name!r}: {out.strip()[:200]}")
        reason = fields.get("Reason", "")
        # Slurm appends " [user@time]" to reasons.
        if reason.endswith("]") and " [" in reason:
            reason = reason[: reason.rindex(" [")]
        return SlurmNode(name, fields.get("State", "UNKNOWN"), reason)

    def drain(self, name: str, reason: str) -> None:
        full = reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"
        self._run(["scontrol", "update", f"NodeName={name}", "State=DRAIN", f"Reason={full[:200]}"])

    def resume(self, name: str) -> None:
        self._run(["scontrol", "update", f"NodeName={name}", "State=RESUME"])
