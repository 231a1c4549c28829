"""What runs after a slurmctld fault's undo: every controller answering again, restarting round by round the ones
that do not (pure logic over a scripted cluster)."""

from __future__ import annotations

from types import SimpleNamespace

from ha_ops.chaos.rollbacks import slurm_controllers_back
from ha_ops.cluster.ops import ServiceOp


class Controllers:
    """A cluster whose `scontrol ping` answers follow a script, one entry per ping (the last one repeats)."""

    def __init__(self, pings: list[dict[str, str]]) -> None:
        self.pings = pings
        self.restarted: list[str] = []
        self.layout = SimpleNamespace(
            nodes_with_role=lambda role: [SimpleNamespace(name="ctl1"), SimpleNamespace(name="ctl2")]
        )

    def slurm(self) -> SimpleNamespace:
        answers = self.pings.pop(0) if len(self.pings) > 1 else self.pings[0]
        return SimpleNamespace(controllers=lambda: list(answers.items()))

    def node(self, host: str) -> SimpleNamespace:
        def apply(op: ServiceOp) -> None:
            assert (op.unit, op.action) == ("slurmctld", "restart")
            self.restarted.append(host)

        return SimpleNamespace(apply=apply)


def test_nothing_is_restarted_when_both_controllers_answer() -> None:
    cluster = Controllers([{"ctl1": "UP", "ctl2": "UP"}])
    slurm_controllers_back(cluster, timeout=0)  # type: ignore[arg-type]
    assert cluster.restarted == []


def test_a_backup_knocked_out_by_the_primary_restart_is_restarted_in_the_next_round() -> None:
    # CI, 2026-12-01: ctl1 was restarted, and from then on ctl2 answered no ping
    cluster = Controllers(
        [{"ctl1": "DOWN", "ctl2": "UP"}, {"ctl1": "UP", "ctl2": "DOWN"}, {"ctl1": "UP", "ctl2": "UP"}]
    )
    slurm_controllers_back(cluster, timeout=0)  # type: ignore[arg-type]
    assert cluster.restarted == ["ctl1", "ctl2"]


def test_restarts_stop_after_the_limit_and_say_which_controller_is_still_down(caplog) -> None:  # type: ignore[no-untyped-def]
    cluster = Controllers([{"ctl1": "UP", "ctl2": "DOWN"}])
    slurm_controllers_back(cluster, timeout=0, restarts=2)  # type: ignore[arg-type]
    assert cluster.restarted == ["ctl2", "ctl2"]
    assert "slurmctld on ctl2 still does not answer after 2 restarts" in caplog.text
