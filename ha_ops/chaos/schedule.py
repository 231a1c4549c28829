"""A recurring game day: a systemd service and timer on an operator host, or a Kubernetes CronJob. Both run the
installed ha-ops against the cluster's inventory, under a time limit, into one reports root: each run writes its
own folder there and the history page across runs (chaos/report.py)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

from ha_ops.errors import SpecError

REPORTS = "/var/lib/ha-ops/gamedays"
# Inside the CronJob's pod: the Secret with the inventory, SSH key and known_hosts, and the reports volume.
CLUSTER_DIR = "/etc/ha-ops/cluster"
POD_REPORTS = "/reports"
DIGEST = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Schedule:
    plan: Path
    every: str
    timeout_s: int = 3600
    inventory: Path | None = None
    target: str | None = None  # lab:NAME, when no inventory

    def __post_init__(self) -> None:
        # Every value lands in a unit file or a manifest, one per line: a newline in `every` once added directives
        # of the caller's choosing to the timer (`Mon 03:00\nOnCalendar=minutely`, or an ExecStart elsewhere).
        fields = {"--every": self.every, "PLAN": str(self.plan), "--inventory": str(self.inventory or ""),
                  "--target": self.target or ""}  # fmt: skip
        problems = [f"{name}: control characters are not allowed ({value[:60]!r})"
                    for name, value in fields.items() if CONTROL.search(value)]  # fmt: skip
        if not self.every.strip():
            problems.append("--every: give when to run, e.g. 'Mon 03:00' (systemd) or '0 3 * * 1' (cron)")
        if self.timeout_s <= 0:
            problems.append(f"--timeout-s: must be positive (got {self.timeout_s})")
        if problems:
            raise SpecError("gameday schedule", problems)


def _cluster_args(s: Schedule, inventory: str | None) -> list[str]:
    return ["--inventory", inventory] if inventory else ["--target", s.target or "lab:lab"]


def render_systemd(s: Schedule, ha_ops: Path) -> dict[str, str]:
    """A oneshot service that runs `ha_ops` (an absolute path: timers run with a bare PATH) and its timer."""
    if not ha_ops.is_absolute():
        raise SpecError("--ha-ops", [f"{ha_ops} is not an absolute path (a timer's service has no useful PATH)"])
    inventory = str(s.inventory.resolve()) if s.inventory else None
    argv = [str(ha_ops), "gameday", "run", str(s.plan.resolve()), *_cluster_args(s, inventory)]
    # systemd expands % itself: %% passes one through (a plan or inventory path may hold one).
    command = shlex.join([*argv, "--report-dir", REPORTS]).replace("%", "%%")
    service = "\n".join([
        "[Unit]",
        f"Description=ha-ops game day {s.plan.stem}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart=/bin/sh -c {shlex.quote('exec ' + command)}",
        f"TimeoutStartSec={s.timeout_s}",
        "StateDirectory=ha-ops/gamedays",
        "",
    ])  # fmt: skip
    timer = "\n".join([
        "[Unit]",
        f"Description=Recurring ha-ops game day {s.plan.stem}",
        "",
        "[Timer]",
        f"OnCalendar={s.every}",
        "Persistent=true",
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
    ])  # fmt: skip
    return {"ha-ops-gameday.service": service, "ha-ops-gameday.timer": timer}


def render_cronjob(s: Schedule, image: str, secret: str, reports_claim: str, plan_in_image: PurePosixPath) -> str:
    """A CronJob whose pod runs ha-ops from an image pinned by digest, with the inventory, SSH key and known_hosts
    from a Secret (mounted read-only at /etc/ha-ops/cluster; the inventory names its files there) and a volume for
    the reports and the fault journal (a later run's cleanup finds what a killed one left)."""
    if not DIGEST.match(image):
        raise SpecError("--image", [f"{image!r} is not pinned by digest (REPOSITORY@sha256:<64 hex digits>)"])
    if s.inventory is None:
        raise SpecError("--inventory", ["a CronJob reaches the cluster over SSH: give the inventory"])
    inventory = f"{CLUSTER_DIR}/{s.inventory.name}"
    argv = ["ha-ops", "gameday", "run", str(plan_in_image), *_cluster_args(s, inventory)]
    command = "exec " + shlex.join([*argv, "--report-dir", POD_REPORTS])
    pod = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "fsGroup": 65532,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "gameday",
            "image": image,
            "command": ["sh", "-c", command],
            "env": [{"name": "XDG_STATE_HOME", "value": f"{POD_REPORTS}/state"}, {"name": "HOME", "value": "/tmp"}],
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [
                {"name": "cluster", "mountPath": CLUSTER_DIR, "readOnly": True},
                {"name": "reports", "mountPath": POD_REPORTS},
                {"name": "tmp", "mountPath": "/tmp"},
            ],
        }],
        "volumes": [
            {"name": "cluster", "secret": {"secretName": secret, "defaultMode": 0o440}},
            {"name": "reports", "persistentVolumeClaim": {"claimName": reports_claim}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }  # fmt: skip
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": f"ha-ops-gameday-{re.sub(r'[^a-z0-9-]', '-', s.plan.stem.lower())}"},
        "spec": {
            "schedule": s.every,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 0, "activeDeadlineSeconds": s.timeout_s,
                                     "template": {"spec": pod}}},
        },
    }  # fmt: skip
    return yaml.safe_dump(cron, sort_keys=False)
