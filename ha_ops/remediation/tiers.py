"""Reliability tiers (history.py) published to the scheduler by the leader, a round at a time in a thread of its
own, when a node's tier changes: a scheduler call that fails is logged and tried again later, and never holds up or
fails an episode."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ha_ops.remediation import history
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.lease import LeaseLost
from ha_ops.remediation.term import Term, in_background
from ha_ops.schedulers.base import Scheduler

log = logging.getLogger(__name__)

TIERS_PER_ROUND = 32  # reliability tiers published per round (never a storm of scheduler writes)
TIER_RETRY_S = 60.0  # a tier the scheduler refused is tried again after this

Due = tuple[str, str, str, str, int]  # (node, tier, why, tier before, token)


class TierPublisher:
    def __init__(
        self,
        config: ControllerConfig,
        term: Term,
        scheduler: Scheduler,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.term = term
        self.scheduler = scheduler
        self.clock = clock
        self._publishing = threading.Lock()  # held by the round of tier publications under way
        self.thread: threading.Thread | None = None
        self._retry: dict[str, float] = {}  # node -> when its refused tier is tried again (this leader's memory)

    def _publisher(self) -> Callable[[dict[str, str]], dict[str, Exception]] | None:
        """The scheduler's set_reliabilities (a round's tiers in one call: Slurm reads its nodes once for them),
        unless tiers are not published (the config, shadow mode, or a scheduler without it)."""
        if not self.config.fleet.publish_tiers or self.config.safety.dry_run:
            return None
        return getattr(self.scheduler, "set_reliabilities", None)

    def _due(self) -> list[Due]:
        """(node, tier, why, tier before, token) for the nodes whose tier changed, a round's worth (one pass)."""
        with self.term.lock:
            state, token = self.term.state, self.term.token
            if state is None or token is None:
                return []
            now = self.clock()
            changes = history.tier_changes(state.nodes.values(), now, self.config.fleet, self.config.lemon)
            due = [(rec.name, tier, why, rec.tier, token) for rec, tier, why in changes
                   if self._retry.get(rec.name, 0.0) <= now]  # fmt: skip
        return due[:TIERS_PER_ROUND]

    def in_background(self) -> None:
        """A round of tier publications in a thread of its own (one round at a time): a slow or hung scheduler
        delays tiers, never the decisions or the actions."""
        publish = self._publisher()
        if publish is None or not self._publishing.acquire(blocking=False):
            return
        try:
            due = self._due()
        except BaseException:
            self._publishing.release()
            raise
        if not due:
            self._publishing.release()
            return
        self.thread = in_background(self._publishing, "tiers", "publishing reliability tiers",
                                    lambda: self._publish(publish, due))  # fmt: skip

    def publish_round(self) -> int:
        """One round of tier publications in this thread (tests; the loop uses the background round). Returns how
        many were published."""
        publish = self._publisher()
        return self._publish(publish, self._due()) if publish is not None else 0

    def _publish(self, publish: Callable[[dict[str, str]], dict[str, Exception]], due: list[Due]) -> int:
        term = self.term
        done = []
        try:
            for token in {d[4] for d in due}:
                term.lease.check(token)  # a deposed leader publishes nothing
        except LeaseLost:
            return 0
        tiers = {name: tier for name, tier, _, _, _ in due}
        try:
            failed = publish(tiers)
        except Exception as exc:  # (the scheduler's read failed: every tier of the round waits for its retry)
            failed = dict.fromkeys(tiers, exc)
        for name, tier, why, before, token in due:
            exc = failed.get(name)
            if exc is not None:
                log.warning("reliability tier %s of %s not published (again in %g s): %s", tier, name,
                            TIER_RETRY_S, exc)  # fmt: skip
                with term.lock:
                    self._retry[name] = self.clock() + TIER_RETRY_S
                continue
            log.info("%s: reliability tier %s (%s)", name, tier, why)
            done.append((name, tier, why, before, token))
        if not done:
            return 0
        with term.lock:
            for name, tier, why, before, token in done:
                rec = term.state.nodes.get(name) if term.state is not None and term.token == token else None
                if rec is None:
                    continue
                rec.tier = tier
                self._retry.pop(name, None)
                term.audit(token, "set_tier", name, why, before or "as configured", tier)
        try:
            term.persist()
        except Exception as exc:  # (deposed, or the storage away: the next write holds it)
            log.warning("writing the published tiers: %s", exc)
        return len(done)
