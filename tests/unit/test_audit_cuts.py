"""Issue 44, finding 5: the four ways to cut the audit history, each named by `ha-ops audit verify --config` (the
log, the state and the lease where the controllers keep them, with the audit key). Before: a tail cut with the
state's head pointed at the last entry kept said "chain intact and matching", and the log and the state deleted
together said "0 entries, chain intact". The takeovers that name them: test_remediation_controller.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.cli_helpers import run_main
from tests.unit.test_remediation_controller import Clock, Rig, report

CUTS = {
    "tail": "records seq {seq} but the log ends at seq 2",
    "tail and the state's head": "with an HMAC the audit key did not make",
    "log deleted": "the lease records the audit head at seq {seq}",
    "log and state deleted": "the lease records the audit head at seq {seq}",
}


@pytest.mark.parametrize("cut", sorted(CUTS))
def test_each_cut_is_named_by_audit_verify_with_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, cut: str
) -> None:
    (tmp_path / "key").write_bytes(b"s" * 32)
    rig = Rig(tmp_path, "ctl1", Clock(), update={"audit_key_file": tmp_path / "key"})
    rig.c.lease_step()
    rig.c.handle_report(report())
    rig.step(ticks=8)
    rig.step(seconds=1.0, ticks=2)  # (the lease renewed with the head saved)
    seq = rig.state().audit_seq
    config = tmp_path / "controller.yaml"
    pools = {"p": {"nodes": ["n1", "n2", "n3", "n4"], "spares": ["s1"]}}
    config.write_text(yaml.safe_dump({"id": "ctl1", "state_dir": str(rig.dir), "insecure": True,
                                      "audit_key_file": str(tmp_path / "key"), "pools": pools}))  # fmt: skip
    verify = ["audit", "verify", "--config", str(config)]
    assert run_main(monkeypatch, *verify) == 0
    assert "chain intact and matching the controller's state" in capsys.readouterr().out
    log, state = rig.dir / "audit.jsonl", rig.dir / "state.json"
    kept = log.read_text().splitlines()[:2]
    if cut.startswith("tail"):
        log.write_text("".join(f"{line}\n" for line in kept))
    else:
        log.unlink()
    if cut == "tail and the state's head":
        last = json.loads(kept[-1])
        state.write_text(json.dumps(json.loads(state.read_text()) | {"audit_seq": last["seq"],
                                                                       "audit_hash": last["hash"]}))  # fmt: skip
    if cut == "log and state deleted":
        state.unlink()
    assert run_main(monkeypatch, *verify) == 1
    err = capsys.readouterr().err
    assert CUTS[cut].format(seq=seq) in err, err
