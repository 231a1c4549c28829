"""The remediation policy: from reports, alerts and the cluster's state to node phases and intents. No I/O.
Its entry points are here; an episode's steps are in episodes.py, the building blocks in decisions.py.

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

from typing import Any

from ha_ops.monitoring.rules import alert_names
from ha_ops.remediation import bursts, history
from ha_ops.remediation import lost as lost_nodes
from ha_ops.remediation.config import ControllerConfig
from ha_ops.remediation.decisions import (
    DRAIN_RETRY_S,
    REASON_GPU,
    Outcome,
    end_maintenance,
    maintenance_of,
    make_intent,
    recent_returns,
    set_phase,
    start_maintenance,
    starting_rung,
)
from ha_ops.remediation.episodes import (
    agent_drained,
    episode_done,
    follow_repair,
    manage_spares,
    repaired,
    start_rung,
    take_out_of_service,
)
from ha_ops.remediation.model import (
    MAX_BURSTS,
    BurstRecord,
    ControllerState,
    LastReport,
    NodePhase,
    NodeRecord,
    Rung,
)
from ha_ops.remediation.observers import NO_VIEW, NodeView
from ha_ops.schedulers.base import AGENT_REASON_PREFIX

# What callers read from here: the decisions' entry points, and the parts they are built from.
__all__ = ["NodeView", "Outcome", "compact", "end_maintenance", "init_state", "maintenance_of", "name_burst_job",
           "on_alert", "on_report", "on_tick", "repaired", "start_maintenance", "starting_rung"]  # fmt: skip


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


def _stale(previous: LastReport | None, report: Any, skew_s: float, now: float) -> str | None:
    """Why a report is not fresh, or None. Within one agent run its seq orders its reports; across runs (a restarted
    agent starts its seq again under a new agent_id) only the time it was sent can, within the clocks' skew: else a
    replayed report of an earlier run would be taken as new (issue 44, finding 10)."""
    if report.sent_at > now + skew_s:
        return f"a report sent {report.sent_at - now:.0f} s in the future (over report_clock_skew_s {skew_s:g})"
    if previous is None:
        return None
    if previous.agent_id == report.agent_id and report.seq < previous.seq:
        return f"stale report seq {report.seq} < {previous.seq}"
    if report.sent_at < previous.sent_at - skew_s:
        return (f"stale report sent {previous.sent_at - report.sent_at:.0f} s before the last one accepted (agent "
                f"{report.agent_id!r}; over report_clock_skew_s {skew_s:g})")  # fmt: skip
    return None


def on_report(state: ControllerState, report: Any, config: ControllerConfig, now: float, token: int) -> Outcome:
    """Apply one agent report (ha_ops.health.report.AgentReport)."""
    rec = state.nodes.get(report.node)
    if rec is None:
        return Outcome(ignored=f"unknown node {report.node!r}")
    previous = rec.last_report
    if (why := _stale(previous, report, config.report_clock_skew_s, now)) is not None:
        return Outcome(ignored=f"{why} from {report.node}")
    critical_gpus = sorted({f.gpu for f in report.findings if f.severity == "critical" and f.gpu is not None})
    rec.last_report = LastReport(
        state=report.state,
        action=str(report.action),
        reason=report.reason,
        seq=report.seq,
        agent_id=report.agent_id,
        sent_at=max(report.sent_at, previous.sent_at if previous else 0.0),
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
        set_phase(rec, NodePhase.SUSPECT, now, f"agent reports {report.state}: {report.reason}")
    elif rec.phase == NodePhase.SUSPECT and report.state == "healthy":
        set_phase(rec, NodePhase.HEALTHY, now, "")
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
                set_phase(member, NodePhase.SUSPECT, now, f"{last.reason} (spared: {new.message()})")
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
            set_phase(rec, NodePhase.SUSPECT, now, f"{reason} (spared: {tracker.burst.message()})")
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
        set_phase(rec, NodePhase.SUSPECT, now, f"alert {name}")
    return Outcome(notes=[f"alert {name} on {node}: watching"])


def on_tick(
    state: ControllerState, views: dict[str, NodeView], config: ControllerConfig, now: float, token: int
) -> Outcome:
    out = Outcome()
    ladder = config.ladder
    retry_deferred(state, config, now, token, out)
    _release_held(state, config, now, token, out)
    for rec in state.nodes.values():
        if rec.maintenance is not None and maintenance_of(rec, now) is None:
            out.ended_maintenance.append((rec.name, rec.maintenance))
            out.notes.append(f"{rec.name}: maintenance window expired ({rec.maintenance.reason})")
            rec.maintenance = None
    judgement = lost_nodes.judge(state, views, config, now)
    out.notes += judgement.notes
    for rec in state.nodes.values():
        slurm_state = views.get(rec.name, NO_VIEW).state
        if not slurm_state or rec.maintenance is not None:
            continue  # no fresh node states this tick; or a rollout drains, reboots and returns it (not lost)
        view = views.get(rec.name, NO_VIEW)
        lost = rec.name in judgement.lost
        # Act when a node is found lost (or again while its cordon waits for the rate limit), not on every poll: a
        # refused cordon (breaker open) is not retried and logged forever.
        newly_lost = lost and (not rec.lost or rec.name in state.deferred)
        if (rec.slurm_state, rec.lost) != (slurm_state, lost):  # (a model's setattr validates: only on a change)
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
            gpus = report.gpus if report is not None and unhealthy else [int(g) for g in REASON_GPU.findall(said)[:1]]
            why = f"adopted the drain its agent made: {said}"
            taken = take_out_of_service(state, rec, why, action, gpus, config, now, token, jobs=view.jobs)
            out.intents += taken.intents
            out.notes += taken.notes + ([taken.ignored] if taken.ignored else [])
    for rec in state.nodes.values():
        if rec.phase is NodePhase.HEALTHY:
            continue  # nothing below is for a healthy node (most of a fleet, at every tick)
        view = views.get(rec.name, NO_VIEW)
        drain = episode_done(state, rec, "drain") if rec.phase == NodePhase.CORDONED else None
        if drain is not None and drain.status == "failed":
            # Never repair a node Slurm still schedules onto: try the drain again, after a pause.
            if now - drain.created_at >= DRAIN_RETRY_S:
                out.notes.append(f"{rec.name}: drain failed ({drain.result}); trying again")
                out.intents.append(make_intent(state, rec, "drain", rec.reason, now, token))
        elif drain is not None:
            set_phase(rec, NodePhase.DRAINING, now)
        jobs_gone = not view.jobs or now - rec.since >= ladder.drain_timeout_s
        if rec.phase == NodePhase.DRAINING and episode_done(state, rec, "requeue_jobs") and jobs_gone:
            set_phase(rec, NodePhase.DRAINED, now)
        if rec.phase == NodePhase.DRAINED:
            start_rung(state, rec, rec.rung or Rung.RESET_GPU, now, token, out)
        elif rec.phase == NodePhase.AWAITING_REPAIR and rec.rung not in (None, Rung.REPLACE):
            follow_repair(state, rec, config, now, token, out)
        if rec.phase == NodePhase.AWAITING_REPAIR and episode_done(state, rec, "resume"):
            rec.returns = [*recent_returns(rec, config, now), now]
            set_phase(rec, NodePhase.RETURNED, now, "")
            history.returned(rec, now)
        if rec.phase == NodePhase.RETURNED and now - rec.since >= ladder.probation_s:
            set_phase(rec, NodePhase.HEALTHY, now, "")
    manage_spares(state, views, now, token, out)
    history.trim(state.nodes.values(), config.fleet.max_incidents)
    return out


def retry_deferred(state: ControllerState, config: ControllerConfig, now: float, token: int, out: Outcome) -> None:
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


def compact(state: ControllerState, keep_finished: int = 200) -> None:
    """Forget finished intents of finished episodes, keeping the latest few for `controller status`."""
    if len(state.intents) <= keep_finished:
        return  # each is pending or among the latest kept: nothing to forget (and no pass over 25,000 nodes a tick)
    active = {r.name: r.episode for r in state.nodes.values() if r.phase not in (NodePhase.HEALTHY, NodePhase.SUSPECT)}
    finished = [i for i in state.intents if i.status != "pending"]
    recent = {id(i) for i in finished[max(0, len(finished) - keep_finished) :]}  # [-0:] would keep them all
    state.intents = [
        i
        for i in state.intents
        if i.status == "pending" or id(i) in recent or active.get(i.node) == i.args.get("episode")
    ]
