"""`ha-ops controller check-config`: the ha_ops_controller role's `validate:` for controller.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.cli_helpers import run_main

GOOD = """\
id: ctl1
peers: [https://10.0.0.1:8800, https://10.0.0.2:8800]
state_dir: /srv/ha-ops/controller
tls: {ca_file: /etc/ha-ops/pki/ca.crt, cert_file: /etc/ha-ops/pki/c.crt, key_file: /etc/ha-ops/pki/c.key}
pools:
  h100: {nodes: [gpu1, gpu2], spares: [gpu3]}
"""
PLAIN = GOOD.replace("https://", "http://").replace("tls: {", "# tls: {")


def test_a_good_config_is_ok_and_says_what_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "controller.yaml"
    path.write_text(GOOD)
    assert run_main(monkeypatch, "controller", "check-config", str(path)) == 0
    out = capsys.readouterr().out
    assert "ok (id ctl1, slurm, state in /srv/ha-ops/controller; pools h100 (2 nodes, 1 spares); mutual TLS)" in out


@pytest.mark.parametrize("command", ["check-config", "run"])
def test_a_config_without_tls_is_refused_unless_it_says_insecure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, command: str
) -> None:
    # Secure by default (issue 44, finding 4): plain HTTP let anyone report, mark nodes repaired or drain them.
    path = tmp_path / "controller.yaml"
    path.write_text(PLAIN)
    assert run_main(monkeypatch, "controller", command, *(["--config"] if command == "run" else []), str(path)) == 2
    err = capsys.readouterr().err
    assert "tls: required" in err and "insecure: true" in err and "Traceback" not in err
    if command == "check-config":
        path.write_text(PLAIN + "insecure: true\n")
        assert run_main(monkeypatch, "controller", command, str(path)) == 0
        assert "; plain HTTP (insecure: true))" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("state_dir: /srv/ha-ops/controller\n", ""), "state_dir is required"),
        (("id: ctl1", "id: ctl1\nport: 70000"), "port"),
        (("pools:", "safety: {breaker_max_nodes: 0}\npools:"), "safety.breaker_max_nodes"),
        (("id: ctl1", "id: ctl1\nlease_tll_s: 3"), "lease_tll_s"),
    ],
)
def test_a_bad_config_exits_2_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, change: tuple[str, str], field: str
) -> None:
    path = tmp_path / "controller.yaml"
    path.write_text(GOOD.replace(*change))
    assert run_main(monkeypatch, "controller", "check-config", str(path)) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
