"""When the remediation controller fences a hung Slurm primary (ha_ops.remediation.slurm_fence)."""

from __future__ import annotations

from ha_ops.remediation.slurm_fence import FenceWatch

UP_UP = [("ctl1", "UP"), ("ctl2", "UP")]
HUNG = [("ctl1", "DOWN"), ("ctl2", "UP")]


def test_a_primary_down_with_the_backup_up_is_fenced_once_after_the_delay() -> None:
    watch = FenceWatch(after_s=10)
    assert watch.observe(HUNG, 100) is None
    assert watch.observe(HUNG, 109) is None
    assert watch.observe(HUNG, 110) == "ctl1"
    assert watch.observe(HUNG, 130) is None  # once per outage


def test_a_primary_that_answers_again_is_watched_afresh() -> None:
    watch = FenceWatch(after_s=10)
    watch.observe(HUNG, 100)
    assert watch.observe(HUNG, 110) == "ctl1"
    watch.observe(UP_UP, 120)
    assert watch.observe(HUNG, 121) is None
    assert watch.observe(HUNG, 131) == "ctl1"


def test_no_fence_without_a_backup_up_or_with_a_single_controller() -> None:
    watch = FenceWatch(after_s=0)
    assert watch.observe([("ctl1", "DOWN"), ("ctl2", "DOWN")], 100) is None  # fencing would leave no controller
    assert watch.observe([("ctl1", "DOWN")], 100) is None
    assert watch.observe([("ctl1", "UP"), ("ctl2", "DOWN")], 100) is None  # a hung backup holds no client


def test_a_blip_resets_the_clock() -> None:
    watch = FenceWatch(after_s=10)
    watch.observe(HUNG, 100)
    watch.observe(UP_UP, 105)
    assert watch.observe(HUNG, 111) is None
    assert watch.observe(HUNG, 121) == "ctl1"
