"""The remediation policy: from reports, alerts and the cluster's state to node phases and intents. No I/O.

Per node (see model.NodePhase):
- an unhealthy report takes a node in service out (through the safety gate): cordon (Slurm drain), bring in a spare
  of its pool, requeue its requeueable jobs; degraded or unknown reports only mark it suspect;
- once its jobs are gone (or the drain timeout passes) the repair ladder starts at the rung the report asks for
  (reset GPU, reboot node, replace); each step is followed by a validation; a pass returns the node to service,
  a failure or a timeout climbs one rung; `replace` holds the node out until a person reports it repaired;
- a node that fails again on probation, or that flapped `max_flaps` times within the flap window, starts higher:
  a flapping GPU climbs the ladder instead of looping through drain and resume;
- spares leave the main partition again once the node they stood in for is back and they are idle;
- a lost node (Slurm marks it DOWN or not responding, and its agent is silent to every controller: two observers;
  the silence counted from when the leader began to lead at the earliest)
  is taken out like an unhealthy one, starting at the reboot rung; the safety gate still applies, so a Slurm glitch
  that marks many nodes down trips the breaker;
- a node an agent drained itself (no controller accepted its report in time) is adopted: taken out of service as if
  the report had arrived, so that the ladder repairs and returns it;
- each episode is an incident in the node's history (history.py): its cause, its steps and how it ended; a node with
  `lemon.incidents` incidents within `lemon.window_s` is a lemon: validated, it is held for replacement instead of
  being returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ha_ops.monitoring.rules import alert_names
from ha_ops.remediation import bursts, history
from ha_ops.remediation import lost as lost_nodes
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.model import (
    MAX_BURSTS,
    OUT_OF_SERVICE,
    BurstRecord,
    ControllerState,
    Intent,
    IntentKind,
    LastReport,
    Maintenance,
    NodePhase,
    NodeRecord,
    Rung,
)
from ha_ops.remediation.observers import NodeView
from ha_ops.remediation.safety import gate_cordon
from ha_ops.schedulers.base import AGENT_REASON_PREFIX

DRAIN_RETRY_S = 10.0
_REASON_GPU = re.compile(r"^GPU(\d+) ")  # an agent's verdict reason starts with the GPU it is about

_RUNG_FOR_ACTION = {
    "drain": Rung.RESET_GPU,
    "reset_gpu": Rung.RESET_GPU,
    "reboot_node": Rung.REBOOT_NODE,
    "replace": Rung.REPLACE,
}


@dataclass
class Outcome:
    """What one decision did: intents added, and notes for the log (and the HTTP answer)."""

    intents: list[Intent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ignored: str = ""
    burst: str | None = None  # a burst of application XIDs began: its id (the controller names its job)
    ended_maintenance: list[tuple[str, Maintenance]] = field(default_factory=list)  # expired windows (audited)


def init_state(state: ControllerState, config: ControllerConfig, now: float) -> None:
    """Make sure every configured node has a record (new nodes appear; records of removed nodes stay)."""
    # A node added once the history runs is observed from when it appears (MTBI); the others from when it began
    # (stored once, not in each of 1,500 records written at every commit).
    seen = now if state.history_since else 0.0
    if not state.history_since:
        state.history_since = now
    for pool_name, pool in config.pools.items():
        for name in pool.nodes:
            if name not in state.nodes:
                state.nodes[name] = NodeRecord(name=name, pool=pool_name, since=now, seen_since=seen)
        for name in pool.spares:
            if name not in state.nodes:
                state.nodes[name] = NodeRecord(
                    name=name, pool=pool_name, spare=True, in_main=False, since=now, seen_since=seen
                )


def _intent(
    state: ControllerState, rec: NodeRecord, kind: IntentKind, why: str, now: float, token: int, **args: Any
) -> Intent:
    intent = Intent(
        id=f"{state.next_intent:08d}-{rec.name}-{kind}",
        node=rec.name,
        kind=kind,
        why=why,
        args={"episode": rec.episode, **args},
        created_at=now,
        token=token,
    )
    state.next_intent += 1
    state.intents.append(intent)
    return intent


def _set_phase(rec: NodeRecord, phase: NodePhase, now: float, reason: str | None = None) -> None:
    rec.phase = phase
    rec.since = now
    if reason is not None:
        rec.reason = reason


def free_spares(state: ControllerState, pool: str) -> list[NodeRecord]:
    """The pool's spares that may stand in: healthy, outside the main partition, for nobody yet, and not in a
    maintenance window (a rollout changing a spare's driver has it drained)."""
    return [
        r
        for r in state.nodes.values()
        if r.pool == pool and r.spare and not r.in_main and r.spare_for is None and r.phase == NodePhase.HEALTHY
        and r.maintenance is None
    ]  # fmt: skip


def recent_returns(rec: NodeRecord, config: ControllerConfig, now: float) -> list[float]:
    return [t for t in rec.returns if now - t < config.ladder.flap_window_s]


def starting_rung(rec: NodeRecord, action: str, config: ControllerConfig, now: float) -> Rung:
    rung = _RUNG_FOR_ACTION.get(action, Rung.RESET_GPU)
    flaps = recent_returns(rec, config, now)
    if len(flaps) >= config.ladder.max_flaps:
        return Rung.REPLACE
    on_probation = rec.phase == NodePhase.RETURNED
    if (flaps or on_probation) and rec.rung is not None:
        previous_next = rec.rung.next()
        rung = max(rung, previous_next, key=list(Rung).index)
    return rung


def on_report(state: ControllerState, report: Any, config: ControllerConfig, now: float, token: int) -> Outcome:
    """Apply one agent report (ha_ops.health.report.AgentReport)."""
    rec = state.nodes.get(report.node)
    if rec is None:
        return Outcome(ignored=f"unknown node {report.node!r}")
    previous = rec.last_report
    if previous is not None and previous.agent_id == report.agent_id and report.seq < previous.seq:
        return Outcome(ignored=f"stale report seq {report.seq} < {previous.seq} from {report.node}")
    critical_gpus = sorted({f.gpu for f in report.findings if f.severity == "critical" and f.gpu is not None})
    rec.last_report = LastReport(
        state=report.state,
        action=str(report.action),
        reason=report.reason,
        seq=report.seq,
        agent_id=report.agent_id,
        at=now,
        gpus=critical_gpus,
    )
    if (window := maintenance_of(rec, now)) is not None:
        return Outcome(ignored=f"{rec.name} is in a maintenance window ({window.reason}): report recorded, nothing "
                               "remediated")  # fmt: skip
    out = _watch_bursts(state, rec, report, config, now) if config.bursts.enabled else Outcome()
    if report.state == "unhealthy":
        if config.bursts.enabled and not rec.phase.out_of_service and bursts.only_application(report.findings):
            _spare_or_hold(state, rec, report.reason, config, now, out)
            return out
        taken = take_out_of_service(state, rec, report.reason, str(report.action), critical_gpus, config, now, token)
        taken.notes = out.notes + taken.notes
        taken.burst = out.burst
        return taken
    state.deferred.pop(rec.name, None)  # no longer reported unhealthy: nothing left to hold back
    state.burst_tracker.release(rec.name)
    if rec.phase == NodePhase.HEALTHY and report.state in ("degraded", "unknown"):
        _set_phase(rec, NodePhase.SUSPECT, now, f"agent reports {report.state}: {report.reason}")
    elif rec.phase == NodePhase.SUSPECT and report.state == "healthy":
        _set_phase(rec, NodePhase.HEALTHY, now, "")
    return out


# --- bursts of application XIDs across nodes (remediation/bursts.py) -------------------------------------------
def _watch_bursts(
    state: ControllerState, rec: NodeRecord, report: Any, config: ControllerConfig, now: float
) -> Outcome:
    """Feed the report's application-class XIDs to the burst window (O(1) per report)."""
    out = Outcome()
    tracker, cfg = state.burst_tracker, config.bursts
    xids = bursts.application_xids(report.findings)
    if not xids and rec.name not in tracker.reporting:
        return out
    learning = now - state.leading_since < config.report_fresh_s  # (see BurstTracker.observe)
    new = tracker.observe(rec.name, xids, now, cfg.min_nodes, cfg.window_s, cfg.hold_s, cfg.max_events, learning)
    if new is not None:
        state.bursts.append(BurstRecord(**bursts.record_of(new)))
        del state.bursts[:-MAX_BURSTS]
        out.burst = new.id
        out.notes.append(f"burst: {new.message()}; its nodes are not taken out of service for application XIDs")
        for name in new.nodes:  # (once per burst) those whose escalation was held while it formed: spared
            member = state.nodes.get(name)
            last = member.last_report if member is not None else None
            if (
                member is not None
                and last is not None
                and last.state == "unhealthy"
                and member.phase == NodePhase.HEALTHY
            ):
                _set_phase(member, NodePhase.SUSPECT, now, f"{last.reason} (spared: {new.message()})")
    elif xids and tracker.burst is not None:
        _sync_burst(state, tracker.burst)
    return out


def _sync_burst(state: ControllerState, burst: bursts.Burst) -> None:
    if state.bursts and state.bursts[-1].id == burst.id:
        record = state.bursts[-1]
        for key, value in bursts.record_of(burst).items():
            setattr(record, key, value)


def _spare_or_hold(
    state: ControllerState, rec: NodeRecord, reason: str, config: ControllerConfig, now: float, out: Outcome
) -> None:
    """An unhealthy report made only of application XIDs (escalated repeats): a node of a burst is spared (watched,
    not taken out); another waits window_s, in case a burst is forming (on_tick then acts on it: _release_held)."""
    tracker, cfg = state.burst_tracker, config.bursts
    if tracker.spares(rec.name, now, cfg.hold_s):
        assert tracker.burst is not None
        _sync_burst(state, tracker.burst)
        if rec.phase == NodePhase.HEALTHY:
            _set_phase(rec, NodePhase.SUSPECT, now, f"{reason} (spared: {tracker.burst.message()})")
        return
    if rec.name not in tracker.held:
        out.notes.append(f"{rec.name}: application XIDs only; waiting {cfg.window_s:g} s for a burst before acting")
    tracker.hold(rec.name, now)


def _release_held(state: ControllerState, config: ControllerConfig, now: float, token: int, out: Outcome) -> None:
    """Escalated application-XID reports whose wait is over and that no burst took in: acted on as before."""
    tracker = state.burst_tracker
    if not tracker.held:
        return
    for name in tracker.due(now, config.bursts.window_s):
        rec = state.nodes.get(name)
        last = rec.last_report if rec is not None else None
        if rec is None or last is None or last.state != "unhealthy" or rec.phase.out_of_service:
            continue
        if tracker.member(name, now, config.bursts.hold_s):
            continue
        taken = take_out_of_service(state, rec, last.reason, last.action, list(last.gpus), config, now, token)
        out.intents += taken.intents
        out.notes += taken.notes + ([taken.ignored] if taken.ignored else [])


def name_burst_job(state: ControllerState, burst_id: str, jobs: list[Any]) -> str | None:
    """The controller asked its scheduler (once per burst): name the job running on most of the burst's nodes.
    Returns the finding to log, or None."""
    burst = state.burst_tracker.burst
    if burst is None or burst.id != burst_id or burst.job:
        return None
    burst.job = bursts.pick_job(burst.nodes, jobs)
    if burst.job is None:
        return None
    _sync_burst(state, burst)
    return f"burst: {burst.message()}"


def on_alert(
    state: ControllerState, alert: dict[str, Any], config: ControllerConfig, now: float, token: int
) -> Outcome:
    """Apply one Alertmanager alert. Only node-health alerts act; an agent or target being down never drains."""
    labels = alert.get("labels", {})
    name, node = labels.get("alertname", ""), labels.get("node") or labels.get("instance", "").split(":")[0]
    if name.startswith("HaOpsStorage"):
        # Storage faults are not a node's: the controller records them (status, metrics) and never cordons for them;
        # recovering the storage master is the storage runbook's step. Only the names our rules raise are kept.
        if name not in alert_names():
            return Outcome(ignored=f"alert {name[:80]!r} is not one of ha-ops' alerts")
        if alert.get("status") == "firing":
            state.storage_alerts.setdefault(name, now)
            return Outcome(notes=[f"storage alert {name} firing"])
        state.storage_alerts.pop(name, None)
        return Outcome(notes=[f"storage alert {name} resolved"])
    if alert.get("status") != "firing":
        return Outcome(notes=[f"alert {name} resolved"])
    rec = state.nodes.get(node)
    if rec is None:
        return Outcome(ignored=f"alert {name} names no known node ({node!r})")
    if (window := maintenance_of(rec, now)) is not None:
        return Outcome(ignored=f"alert {name} on {node}: in a maintenance window ({window.reason})")
    if name == "HaOpsGpuNodeUnhealthy":
        # Alerts lag and are retried; they are the fallback for an agent that cannot reach the controller. The
        # agent's own recent report is the better witness, and a new leader first gives every agent time to report.
        if now - state.leading_since < config.report_fresh_s:
            return Outcome(ignored=f"alert {name} on {node}: the leader is new; waiting for the agents' reports")
        fresh = rec.last_report is not None and now - rec.last_report.at < config.report_fresh_s
        if fresh and rec.last_report is not None and rec.last_report.state != "unhealthy":
            return Outcome(ignored=f"alert {name} on {node}: the agent reported {rec.last_report.state} just now")
        reason = alert.get("annotations", {}).get("summary", name)
        return take_out_of_service(state, rec, f"alert: {reason}", "reset_gpu", [], config, now, token)
    if rec.phase == NodePhase.HEALTHY:
        _set_phase(rec, NodePhase.SUSPECT, now, f"alert {name}")
    return Outcome(notes=[f"alert {name} on {node}: watching"])


def take_out_of_service(
    state: ControllerState,
    rec: NodeRecord,
    reason: str,
    action: str,
    gpus: list[int],
    config: ControllerConfig,
    now: float,
    token: int,
    lost: bool = False,
    jobs: tuple[str, ...] = (),
) -> Outcome:
    if rec.phase.out_of_service:
        return Outcome(notes=[f"{rec.name} is already {rec.phase.value}"])
    spares: list[NodeRecord] = []
    looked = False

    def count_spares() -> int:
        nonlocal looked
        if not looked:  # (once: a scan of the pool)
            spares.extend(free_spares(state, rec.pool) if rec.in_main else [])
            looked = True
        return len(spares)

    gate = gate_cordon(state, rec, config.safety, now, count_spares)
    if gate.outcome != "allow":
        if gate.trips_breaker and not state.breaker.open:
            state.breaker.open, state.breaker.reason, state.breaker.opened_at = True, gate.why, now
        if gate.outcome == "defer":
            state.deferred[rec.name] = gate.why
        return Outcome(ignored=f"{rec.name} not cordoned: {gate.why}")
    state.deferred.pop(rec.name, None)
    flap = rec.phase == NodePhase.RETURNED or bool(recent_returns(rec, config, now))
    rung = starting_rung(rec, action, config, now)
    rec.episode += 1
    cause = history.cause_of(reason, lost, flap)
    history.record_start(rec, cause, reason, now, "drain", config.fleet.max_incidents_per_node)
    rec.rung, rec.rung_started = rung, 0.0
    _set_phase(rec, NodePhase.CORDONED, now, reason)
    rec.gpus = list(gpus)
    state.breaker.cordons.append((now, rec.name))
    out = Outcome()
    out.intents.append(_intent(state, rec, "drain", reason, now, token, **({"lost": True} if lost else {})))
    covered: NodeRecord | None = rec
    if rec.spare:
        # A failing stand-in stands in for nobody: the node it covered (if still out) gets another spare, and no
        # spare stands in for a spare (else it stays in service after that node is back, and the node goes uncovered).
        covered = state.nodes.get(rec.spare_for) if rec.spare_for else None
        rec.spare_for = None
        if covered is not None and not covered.phase.out_of_service:
            covered = None
    if covered is not None:
        count_spares()
    if covered is not None and spares:
        _bring_in_spare(state, spares[0], covered, now, token, out)
    release: dict[str, Any] = {}
    if lost:
        # Fence before the work moves: power-cycle the lost node (it may only be cut off, its jobs still running),
        # then release the jobs Slurm requeued from it (Slurm would hold them for cred_expire) - only if the fence
        # succeeded, which the controller checks before it runs the requeue.
        fence = _intent(state, rec, "reboot_node", f"fence: {reason}", now, token, rung=rung.value)
        out.intents.append(fence)
        history.note_action(rec, "fence")
        release = {"release": list(jobs), "fence": fence.id} if jobs else {}
    out.intents.append(_intent(state, rec, "requeue_jobs", f"{rec.name} left service: {reason}", now, token, **release))
    return out


def _episode_done(state: ControllerState, rec: NodeRecord, kind: str) -> Intent | None:
    for intent in reversed(state.intents):
        if intent.node == rec.name and intent.kind == kind and intent.args.get("episode") == rec.episode:
            return intent if intent.status in ("done", "skipped", "failed") else None
    return None


def _episode_has(state: ControllerState, rec: NodeRecord, kind: str, **match: Any) -> bool:
    return any(
        i.node == rec.name
        and i.kind == kind
        and i.args.get("episode") == rec.episode
        and all(i.args.get(k) == v for k, v in match.items())
        for i in state.intents
    )


def _start_rung(state: ControllerState, rec: NodeRecord, rung: Rung, now: float, token: int, out: Outcome) -> None:
    rec.rung, rec.rung_started = rung, now
    if rung == Rung.REPLACE:
        _set_phase(rec, NodePhase.AWAITING_REPAIR, now, f"needs replacement: {rec.reason}")
        history.close(rec, "held for replacement", now, "replace")
        out.notes.append(f"{rec.name} needs replacement; it stays out of service until reported repaired")
        return
    _set_phase(rec, NodePhase.AWAITING_REPAIR, now)
    gpus = rec.gpus or (rec.last_report.gpus if rec.last_report else [])  # (a state written before `gpus`)
    if rung == Rung.RESET_GPU:
        out.intents.append(_intent(state, rec, "reset_gpu", rec.reason, now, token, gpus=gpus or [0], rung=rung.value))
        history.note_action(rec, rung.value)
    elif not _episode_has(state, rec, "reboot_node", rung=rung.value):  # a lost node was power-cycled as its fence
        out.intents.append(_intent(state, rec, "reboot_node", rec.reason, now, token, rung=rung.value))
        history.note_action(rec, rung.value)
    out.intents.append(_intent(state, rec, "validate", f"after {rung.value}", now, token, rung=rung.value))


def agent_drained(view: NodeView, rec: NodeRecord) -> bool:
    """Drained by its agent (fallback: no controller accepted its report) after this controller last changed the
    node's phase: a drain to adopt. A poll that began before the node's last change may predate the controller's own
    resume, so it does not count."""
    return "drain" in view.state.lower() and view.reason.startswith(AGENT_REASON_PREFIX) and rec.since < view.polled_at


def on_tick(
    state: ControllerState, views: dict[str, NodeView], config: ControllerConfig, now: float, token: int
) -> Outcome:
    out = Outcome()
    ladder = config.ladder
    _retry_deferred(state, config, now, token, out)
    _release_held(state, config, now, token, out)
    for rec in state.nodes.values():
        if rec.maintenance is not None and maintenance_of(rec, now) is None:
            out.ended_maintenance.append((rec.name, rec.maintenance))
            out.notes.append(f"{rec.name}: maintenance window expired ({rec.maintenance.reason})")
            rec.maintenance = None
    judgement = lost_nodes.judge(state, views, config, now)
    out.notes += judgement.notes
    for rec in state.nodes.values():
        slurm_state = views.get(rec.name, NodeView()).state
        if not slurm_state or rec.maintenance is not None:
            continue  # no fresh node states this tick; or a rollout drains, reboots and returns it (not lost)
        view = views.get(rec.name, NodeView())
        lost = rec.name in judgement.lost
        # Act when a node is found lost (or again while its cordon waits for the rate limit), not on every poll: a
        # refused cordon (breaker open) is not retried and logged forever.
        newly_lost = lost and (not rec.lost or rec.name in state.deferred)
        rec.slurm_state, rec.lost = slurm_state, lost
        if newly_lost and not rec.phase.out_of_service:
            who = "Kubernetes" if config.scheduler == "kubernetes" else "Slurm"
            why = f"lost: {who} reports it {slurm_state}, its agent is silent"
            jobs = tuple(dict.fromkeys(view.jobs + view.jobs_before))
            taken = take_out_of_service(state, rec, why, "reboot_node", [], config, now, token, lost=True, jobs=jobs)
            out.intents += taken.intents
            out.notes += taken.notes + ([taken.ignored] if taken.ignored else [])
        elif not lost and not rec.phase.out_of_service and agent_drained(view, rec):
            report = rec.last_report
            unhealthy = report is not None and report.state == "unhealthy"
            action = report.action if report is not None and unhealthy else "drain"
            said = view.reason.removeprefix(AGENT_REASON_PREFIX).strip()
            # Without the report, the agent's reason names the GPU ("GPU3 xid: ..."): reset that one, not GPU 0.
            gpus = report.gpus if report is not None and unhealthy else [int(g) for g in _REASON_GPU.findall(said)[:1]]
            why = f"adopted the drain its agent made: {said}"
            taken = take_out_of_service(state, rec, why, action, gpus, config, now, token, jobs=view.jobs)
            out.intents += taken.intents
            out.notes += taken.notes + ([taken.ignored] if taken.ignored else [])
    for rec in state.nodes.values():
        view = views.get(rec.name, NodeView())
        drain = _episode_done(state, rec, "drain") if rec.phase == NodePhase.CORDONED else None
        if drain is not None and drain.status == "failed":
            # Never repair a node Slurm still schedules onto: try the drain again, after a pause.
            if now - drain.created_at >= DRAIN_RETRY_S:
                out.notes.append(f"{rec.name}: drain failed ({drain.result}); trying again")
                out.intents.append(_intent(state, rec, "drain", rec.reason, now, token))
        elif drain is not None:
            _set_phase(rec, NodePhase.DRAINING, now)
        jobs_gone = not view.jobs or now - rec.since >= ladder.drain_timeout_s
        if rec.phase == NodePhase.DRAINING and _episode_done(state, rec, "requeue_jobs") and jobs_gone:
            _set_phase(rec, NodePhase.DRAINED, now)
        if rec.phase == NodePhase.DRAINED:
            _start_rung(state, rec, rec.rung or Rung.RESET_GPU, now, token, out)
        elif rec.phase == NodePhase.AWAITING_REPAIR and rec.rung not in (None, Rung.REPLACE):
            _follow_repair(state, rec, config, now, token, out)
        if rec.phase == NodePhase.AWAITING_REPAIR and _episode_done(state, rec, "resume"):
            rec.returns = [*recent_returns(rec, config, now), now]
            _set_phase(rec, NodePhase.RETURNED, now, "")
            history.returned(rec, now)
        if rec.phase == NodePhase.RETURNED and now - rec.since >= ladder.probation_s:
            _set_phase(rec, NodePhase.HEALTHY, now, "")
    _manage_spares(state, views, now, token, out)
    history.trim(state.nodes.values(), config.fleet.max_incidents)
    return out


def _retry_deferred(state: ControllerState, config: ControllerConfig, now: float, token: int, out: Outcome) -> None:
    """Cordons held back by the rate limit are tried again (through the gate) while the agent's last word is a fresh
    "unhealthy" (an old one waits for the agent's next report). One held back for an alert waits for the alert's next
    delivery."""
    for name in list(state.deferred):
        rec = state.nodes.get(name)
        if rec is None or rec.phase.out_of_service:
            state.deferred.pop(name, None)
            continue
        last = rec.last_report
        if last is None or last.state != "unhealthy" or now - last.at >= config.report_fresh_s:
            continue
        retried = take_out_of_service(state, rec, last.reason, last.action, list(last.gpus), config, now, token)
        out.intents += retried.intents
        out.notes += retried.notes


def _current_validation(state: ControllerState, rec: NodeRecord) -> Intent | None:
    rung = rec.rung.value if rec.rung else None
    for intent in reversed(state.intents):
        if (
            intent.node == rec.name
            and intent.kind == "validate"
            and intent.args.get("episode") == rec.episode
            and intent.args.get("rung") == rung
        ):
            return intent
    return None


def _follow_repair(
    state: ControllerState, rec: NodeRecord, config: ControllerConfig, now: float, token: int, out: Outcome
) -> None:
    assert rec.rung is not None
    validation = _current_validation(state, rec)
    if validation is not None and validation.status != "pending":
        if validation.status in ("done", "skipped") and validation.result == "pass":
            if _episode_has(state, rec, "resume"):
                return
            lemon = history.lemon_reason(rec, config.lemon, now)
            if lemon is not None:
                _hold_lemon(rec, lemon, now, out)
                return
            out.intents.append(_intent(state, rec, "resume", f"validated after {rec.rung.value}", now, token))
            return
        out.notes.append(f"{rec.name}: {rec.rung.value} did not fix it ({validation.result}); climbing the ladder")
        _start_rung(state, rec, rec.rung.next(), now, token, out)
    elif now - rec.rung_started > config.ladder.validate_timeout_s:
        out.notes.append(f"{rec.name}: {rec.rung.value} did not validate in time; climbing the ladder")
        _start_rung(state, rec, rec.rung.next(), now, token, out)


def _hold_lemon(rec: NodeRecord, why: str, now: float, out: Outcome) -> None:
    """The episode would end with a return, but the node is a lemon: held for replacement instead (still drained; a
    person replaces the part and reports it repaired, `ha-ops controller repaired`)."""
    rec.rung, rec.rung_started = Rung.REPLACE, now
    _set_phase(rec, NodePhase.AWAITING_REPAIR, now, why)
    history.close(rec, "held for replacement (lemon)", now, "replace")
    out.notes.append(f"{rec.name} is a {why}; held for replacement instead of being returned")


def _manage_spares(state: ControllerState, views: dict[str, NodeView], now: float, token: int, out: Outcome) -> None:
    def pending(node: str) -> bool:
        return any(
            i.node == node and i.kind in ("spare_in", "spare_out") and i.status == "pending" for i in state.intents
        )

    for spare in state.nodes.values():
        if not spare.spare or not spare.in_main or spare.phase.out_of_service or pending(spare.name):
            continue
        covered = state.nodes.get(spare.spare_for) if spare.spare_for else None
        still_needed = covered is not None and covered.phase.out_of_service
        if not still_needed and not views.get(spare.name, NodeView()).jobs:
            why = f"{spare.spare_for} is back in service" if spare.spare_for else "no node needs a stand-in"
            spare.in_main, spare.spare_for = False, None
            out.intents.append(_intent(state, spare, "spare_out", why, now, token))
    # A node out of service without a stand-in gets one as soon as a spare is free. (Who is covered, and each pool's
    # free spares, found once: a storm puts 150 of 1,500 nodes out of service at once.)
    covered = {s.spare_for for s in state.nodes.values() if s.spare and s.in_main and s.spare_for}
    free: dict[str, list[NodeRecord]] = {}
    for rec in state.nodes.values():
        if rec.phase not in OUT_OF_SERVICE or rec.spare or not rec.in_main or rec.name in covered:
            continue
        if rec.pool not in free:
            free[rec.pool] = free_spares(state, rec.pool)
        spares = free[rec.pool]
        if spares:
            _bring_in_spare(state, spares.pop(0), rec, now, token, out)


def _bring_in_spare(
    state: ControllerState, spare: NodeRecord, rec: NodeRecord, now: float, token: int, out: Outcome
) -> None:
    spare.in_main, spare.spare_for = True, rec.name
    out.intents.append(_intent(state, spare, "spare_in", f"stands in for {rec.name}", now, token, replaces=rec.name))


def repaired(state: ControllerState, node: str, now: float, token: int, by: str = "an operator") -> Outcome:
    """A person (`by`: the operator's identity, for the audit) reports a node repaired (replaced): validate it,
    then return it to service."""
    rec = state.nodes.get(node)
    if rec is None:
        return Outcome(ignored=f"unknown node {node!r}")
    if rec.phase != NodePhase.AWAITING_REPAIR:
        return Outcome(ignored=f"{node} is {rec.phase.value}, not awaiting repair")
    rec.rung, rec.rung_started, rec.returns = Rung.REBOOT_NODE, now, []
    rec.repaired_at = now  # lemon and tier counts start afresh (the history stays)
    out = Outcome(notes=[f"{node} reported repaired; validating"])
    out.intents.append(
        _intent(state, rec, "validate", f"reported repaired by {by}", now, token, rung=Rung.REBOOT_NODE.value)
    )
    return out


def maintenance_of(rec: NodeRecord, now: float) -> Maintenance | None:
    """The node's maintenance window while it lasts (an expired one is closed by the next tick)."""
    return rec.maintenance if rec.maintenance is not None and now < rec.maintenance.until else None


def start_maintenance(
    state: ControllerState, nodes: list[str], reason: str, ttl_s: float, by: str, now: float
) -> dict[str, Maintenance | None]:
    """Open (or extend) a maintenance window on each node; returns each node's window before. ValueError naming the
    first node that is unknown or that ha-ops itself has out of service (its repair is not the rollout's)."""
    for name in nodes:
        rec = state.nodes.get(name)
        if rec is None:
            raise ValueError(f"unknown node {name!r}")
        if rec.phase.out_of_service and rec.maintenance is None:
            raise ValueError(f"{name} is {rec.phase.value} by ha-ops ({rec.reason}): no maintenance window on it")
    before = {}
    for name in nodes:
        rec = state.nodes[name]
        before[name] = rec.maintenance
        since = rec.maintenance.since if rec.maintenance is not None else now
        rec.maintenance = Maintenance(until=now + ttl_s, reason=reason, by=by, since=since)
    return before


def end_maintenance(state: ControllerState, nodes: list[str]) -> dict[str, Maintenance]:
    """Close the windows of these nodes (unknown nodes and nodes without one: nothing to do); returns those closed.
    The node's next report is acted on as usual: a node still failing after a rollback is remediated then."""
    closed = {}
    for name in nodes:
        rec = state.nodes.get(name)
        if rec is not None and rec.maintenance is not None:
            closed[name], rec.maintenance = rec.maintenance, None
    return closed


def compact(state: ControllerState, keep_finished: int = 200) -> None:
    """Forget finished intents of finished episodes, keeping the latest few for `controller status`."""
    active = {r.name: r.episode for r in state.nodes.values() if r.phase not in (NodePhase.HEALTHY, NodePhase.SUSPECT)}
    finished = [i for i in state.intents if i.status != "pending"]
    recent = {id(i) for i in finished[max(0, len(finished) - keep_finished) :]}  # [-0:] would keep them all
    state.intents = [
        i
        for i in state.intents
        if i.status == "pending" or id(i) in recent or active.get(i.node) == i.args.get("episode")
    ]
