"""The GpuHealthy condition of the nodes the controller drains, written after the cordons, and only where the node's
agent has not written it.

On a Kubernetes node the agent sets its node's `GpuHealthy` condition itself (health/agent.py), right after its
report. A drain is the cordon, its taint and its reason, in one write; the condition is not what keeps work off the
node, and in a storm of 150 failing nodes writing it in each drain doubled the writes the cordons queued behind
(the lab's API server answers about 200 node writes a second). So the controller's drain asks this keeper for the
condition instead: after `grace_s` (the agent's own write has usually landed by then) it looks at the node as the
watch last saw it, and writes `GpuHealthy=False` only where the node is still drained by ha-ops and the condition
is not False yet; a node whose agent is dead (a lost node, a drain after an alert) gets it from here.

One thread, one write at a time: the conditions never compete with the cordons for the API server. A write carries
the resourceVersion it judged by, so a node resumed meanwhile is not marked unhealthy (409: judged again).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

RETRIES = 5


class ConditionKeeper:
    def __init__(
        self,
        read: Callable[[str], dict[str, Any] | None],
        needs: Callable[[dict[str, Any]], bool],
        write: Callable[[str, str, str], None],
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
        background: bool = True,
    ) -> None:
        """`read(node)`: the node as last seen (None: gone); `needs(node)`: it is still drained by ha-ops without
        the condition; `write(node, reason, resource_version)`: the condition, conditional on that version.
        `background`: a thread of its own runs what is due (False: the caller calls run_due, as tests with a clock
        of their own do; the thread would race them, waiting real seconds on an injected clock)."""
        self.read, self.needs, self.write = read, needs, write
        self.grace_s = grace_s
        self.clock = clock
        self.background = background
        self._due: list[tuple[float, int, str, str, int]] = []  # (due, order, node, reason, attempt)
        self._order = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def ensure(self, node: str, reason: str) -> None:
        """`node` was drained for `reason`: its condition is to be False within grace_s, by its agent or by us."""
        with self._cond:
            self._push(node, reason, 0, self.clock() + self.grace_s)
            if self._thread is None and self.background:
                self._thread = threading.Thread(target=self._run, name="gpu-conditions", daemon=True)
                self._thread.start()
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._due)

    def _push(self, node: str, reason: str, attempt: int, due: float) -> None:
        self._order += 1
        heapq.heappush(self._due, (due, self._order, node, reason, attempt))

    def run_due(self) -> int:
        """Judge and write every entry that is due now; return how many conditions were written."""
        written = 0
        while True:
            with self._cond:
                if not self._due or self._due[0][0] > self.clock():
                    return written
                _, _, node, reason, attempt = heapq.heappop(self._due)
            written += self._judge(node, reason, attempt)

    def _judge(self, node: str, reason: str, attempt: int) -> int:
        try:
            found = self.read(node)
            if found is None or not self.needs(found):
                return 0  # its agent wrote it, or the node was resumed or removed meanwhile
            self.write(node, reason, str((found.get("metadata") or {}).get("resourceVersion") or ""))
            return 1
        except Exception as exc:  # a 409 (the node changed since it was read) or the API away: judge it again
            if attempt + 1 >= RETRIES:
                log.warning("GpuHealthy on %s not written after %d attempts: %s", node, RETRIES, exc)
                return 0
            with self._cond:
                self._push(node, reason, attempt + 1, self.clock() + min(10.0, 0.5 * 2**attempt))
            return 0

    def _run(self) -> None:
        while True:
            with self._cond:
                wait = self._due[0][0] - self.clock() if self._due else None
                if wait is None or wait > 0:
                    self._cond.wait(wait)
            self.run_due()
