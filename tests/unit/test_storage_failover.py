"""The storage master's failover watcher (ha_ops.storage.failover): when it acts, and that it fences before it
promotes. The real promotion runs in the lab (tests/integration/test_storage.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ha_ops.errors import TransportError
from ha_ops.remediation.audit import verify
from ha_ops.storage.failover import FailoverConfig, FailoverWatcher, MasterWatch
from ha_ops.util.proc import CommandResult
from tests.unit.test_remediation_slurm_fence import Ops

# --- when: pure --------------------------------------------------------------------------------------------------


def test_a_master_unanswered_for_the_delay_is_acted_on_and_an_answer_resets_the_clock() -> None:
    watch = MasterWatch(after_s=3)
    assert watch.observe(False, 3, 3, 100) == "waiting"
    assert watch.observe(False, 3, 3, 102.9) == "waiting"
    assert watch.observe(True, 3, 3, 103) == "up"
    assert watch.observe(False, 3, 3, 104) == "waiting"
    assert watch.observe(False, 2, 3, 107) == "act"  # a majority of peers is enough


def test_a_watcher_that_reaches_no_majority_of_its_peers_is_blind_and_never_acts() -> None:
    watch = MasterWatch(after_s=1)
    for now in range(100, 130):
        assert watch.observe(False, 1, 3, now) == "blind"  # cut off itself: the master may be fine elsewhere
    assert watch.observe(False, 2, 4, 130) == "blind"  # half is no majority
    assert watch.observe(False, 3, 3, 131) == "waiting"  # the clock starts only once it can judge


# --- how: fence first, then promote ------------------------------------------------------------------------------
def _ok(text: str = "ok") -> CommandResult:
    return CommandResult(["sh"], 0, text, "")


def _failed(text: str) -> CommandResult:
    return CommandResult(["sh"], 1, "", text)


class Site(Ops):
    """The cluster as the watcher sees it: which ports answer, what each command returns, what ran in order (ssh to
    the master's host as the Slurm fence's tests have it; here, the BMC's power off or the promotion)."""

    def __init__(self, ssh: CommandResult | Exception = _ok("fenced"), power: CommandResult = _ok("off"),
                 promote: CommandResult = _ok("promoted")) -> None:  # fmt: skip
        super().__init__(ssh, power)
        self.master_up, self.peers_up = True, 3
        self.power, self.promote = power, promote
        self.now = 1000.0

    def answers(self, address: str, port: int, timeout: float) -> bool:
        if port == 9421:
            return self.master_up
        return int(address.rsplit(".", 1)[1]) - 10 < self.peers_up  # peers .10, .11, .12

    def run_here(self, command: str) -> CommandResult:
        self.ran.append(f"here: {command}")
        return self.power if command.startswith("power off") else self.promote


def _config(tmp_path: Path, **over: object) -> FailoverConfig:
    base: dict[str, object] = {
        "id": "mfsml", "master_host": "mfsm", "master_address": "10.0.0.5",
        "peers": ["10.0.0.10:9422", "10.0.0.11:9422", "10.0.0.12:9422"], "after_s": 3, "retry_s": 30,
        "fence_command": "fence", "power_off_command": "power off {node}", "promote_command": "promote",
        "state_dir": str(tmp_path / "watch"),
    }  # fmt: skip
    return FailoverConfig.model_validate({**base, **over})


def _watcher(tmp_path: Path, site: Site, **over: object) -> FailoverWatcher:
    return FailoverWatcher(_config(tmp_path, **over), site.run_on, site.run_here, site.answers, lambda: site.now)


def _steps(watcher: FailoverWatcher, site: Site, seconds: float, every: float = 0.5) -> list[str]:
    found = []
    for _ in range(int(seconds / every)):
        found.append(watcher.step())
        site.now += every
    return found


def _audit(tmp_path: Path) -> list[tuple[str, str]]:
    import json

    lines = (tmp_path / "watch" / "audit.jsonl").read_text().splitlines()
    return [(e["what"], e["after"]) for e in map(json.loads, lines)]


def test_a_killed_master_is_fenced_over_ssh_then_the_metalogger_promoted_once_and_every_step_audited(
    tmp_path: Path,
) -> None:
    site = Site()
    watcher = _watcher(tmp_path, site)
    assert set(_steps(watcher, site, 5)) == {"up"}
    site.master_up = False
    found = _steps(watcher, site, 10)
    assert found.count("promoted") == len(found) - found.index("promoted")  # and nothing after it
    assert found.index("promoted") == 6  # after 3 s unanswered, polled every 0.5 s
    assert site.ran == ["ssh mfsm: fence", "here: promote"]  # fence first; no power off while ssh answers
    assert _audit(tmp_path) == [("fence_storage_master", "fenced over ssh: fenced"),
                                ("promote_metalogger", "a master runs here from the metalogger's files")]  # fmt: skip
    assert verify(tmp_path / "watch" / "audit.jsonl") == []
    # Restarted, it remembers the promotion: this host runs the master now, nothing is promoted twice.
    again = _watcher(tmp_path, site)
    assert set(_steps(again, site, 10)) == {"promoted"} and len(site.ran) == 2


def test_a_master_host_ssh_cannot_reach_is_powered_off_through_its_bmc_before_the_promotion(tmp_path: Path) -> None:
    site = Site(ssh=TransportError("mfsm: cannot reach mfsm:22"))
    watcher = _watcher(tmp_path, site)
    site.master_up = False
    _steps(watcher, site, 5)
    assert site.ran == ["ssh mfsm: fence", "here: power off mfsm", "here: promote"]
    assert "powered off through its BMC" in _audit(tmp_path)[0][1]


@pytest.mark.parametrize(
    "site",
    [
        Site(ssh=_failed("unit busy")),  # it answers ssh but the fence fails: never powered off, never promoted
        Site(ssh=TransportError("mfsm: cannot reach"), power=_failed("BMC: 401")),  # no confirmed power off
    ],
    ids=["fence command failed", "power off failed"],
)
def test_no_promotion_without_a_confirmed_fence_and_a_new_try_only_after_the_pause(tmp_path: Path, site: Site) -> None:
    watcher = _watcher(tmp_path, site)
    site.master_up = False
    _steps(watcher, site, 10)
    assert not any(r.startswith("here: promote") for r in site.ran)
    assert [what for what, _ in _audit(tmp_path)] == ["fence_storage_master"]  # once within retry_s, not per poll
    _steps(watcher, site, 30)
    assert [what for what, _ in _audit(tmp_path)] == ["fence_storage_master"] * 2
    assert not watcher.promoted()


def test_a_failed_promotion_is_tried_again_without_fencing_twice(tmp_path: Path) -> None:
    site = Site(promote=_failed("mfsmaster: cannot load metadata"))
    watcher = _watcher(tmp_path, site)
    site.master_up = False
    _steps(watcher, site, 5)
    site.promote = _ok()
    _steps(watcher, site, 31)
    assert site.ran == ["ssh mfsm: fence", "here: promote", "here: promote"]
    assert watcher.promoted()


def test_a_watcher_cut_off_from_its_peers_touches_nothing(tmp_path: Path) -> None:
    site = Site()
    watcher = _watcher(tmp_path, site)
    site.master_up, site.peers_up = False, 1
    assert set(_steps(watcher, site, 60)) == {"blind"}
    assert site.ran == [] and not (tmp_path / "watch" / "audit.jsonl").exists()


def test_a_dry_run_audits_what_it_would_do_and_changes_nothing(tmp_path: Path) -> None:
    site = Site()
    watcher = _watcher(tmp_path, site, dry_run=True)
    site.master_up = False
    _steps(watcher, site, 10)
    assert site.ran == [] and not watcher.promoted()
    assert [after for _, after in _audit(tmp_path)] == ["dry run: not fenced", "dry run: not promoted"]


def test_a_config_without_peers_or_commands_is_refused_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="peers"):
        _config(tmp_path, peers=[])
    with pytest.raises(ValidationError, match="promote_command"):
        _config(tmp_path, promote_command="")
