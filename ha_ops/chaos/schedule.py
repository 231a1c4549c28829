"""A recurring game day: a systemd service and timer, or a Kubernetes CronJob."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml


def render_schedule(plan_path: Path, every: str, kind: Literal["systemd", "cronjob"], lab: str) -> dict[str, str]:
    """A recurring game day: a systemd service + timer, or a Kubernetes CronJob. `every` is an OnCalendar value
    (systemd) or a cron expression (CronJob)."""
    command = f"ha-ops gameday run {plan_path} --lab {lab} --report-dir /var/lib/ha-ops/gamedays"
    if kind == "systemd":
        service = (
            f"[Unit]\nDescription=ha-ops game day {plan_path.name}\n\n[Service]\nType=oneshot\nExecStart={command}\n"
        )
        return {
            "ha-ops-gameday.service": service,
            "ha-ops-gameday.timer": f"[Unit]\nDescription=Recurring ha-ops game day\n\n[Timer]\nOnCalendar={every}\n"
            "Persistent=true\n\n[Install]\nWantedBy=timers.target\n",
        }
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "ha-ops-gameday"},
        "spec": {
            "schedule": every,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "gameday", "image": "ha-ops", "command": ["sh", "-c", command]}],
            }}}},
        },
    }  # fmt: skip
    return {"ha-ops-gameday-cronjob.yaml": yaml.safe_dump(cron, sort_keys=False)}
