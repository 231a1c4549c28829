"""When to fence a hung Slurm primary: pure bookkeeping over `scontrol ping` answers.

The primary counts as hung once it has been DOWN (not answering pings) for `after_s` while a backup is UP: by then
the backup has taken control, and a primary that is frozen rather than dead still holds clients until their
MessageTimeout. It is fenced once per outage; a primary that answers again is watched afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FenceWatch:
    after_s: float
    down_since: float | None = None
    fenced: set[str] = field(default_factory=set)

    def observe(self, controllers: list[tuple[str, str]], now: float) -> str | None:
        """The host to fence now, if any. `controllers`: [(host, "UP" | "DOWN")], the primary first."""
        if len(controllers) < 2:
            return None
        primary, state = controllers[0]
        if state != "DOWN" or not any(s == "UP" for _, s in controllers[1:]):
            self.down_since = None if state == "UP" else self.down_since
            if state == "UP":
                self.fenced.discard(primary)
            return None
        if self.down_since is None:
            self.down_since = now
        if now - self.down_since < self.after_s or primary in self.fenced:
            return None
        self.fenced.add(primary)
        return primary
