"""Runbook front matter and structure (no lab)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.errors import SpecError
from ha_ops.runbooks.verify import load_runbook

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"


@pytest.mark.parametrize("name", sorted(p.name for p in RUNBOOKS.glob("*.md") if p.name != "README.md"))
def test_shipped_runbooks_load(name: str) -> None:
    runbook, body = load_runbook(RUNBOOKS / name)
    assert runbook.trigger.experiment.exists()
    assert runbook.checks and "## Manual steps" in body


def test_a_runbook_without_front_matter_or_sections_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.md"
    plain.write_text("# no front matter\n")
    with pytest.raises(SpecError, match="front matter"):
        load_runbook(plain)
    text = (RUNBOOKS / "gpu-failure.md").read_text().replace("## Impact", "## Effects")
    text = text.replace("experiment: ../chaos/", f"experiment: {RUNBOOKS.parent}/chaos/")
    missing = tmp_path / "missing.md"
    missing.write_text(text)
    with pytest.raises(SpecError, match="## Impact"):
        load_runbook(missing)
    bad = tmp_path / "bad.md"
    bad.write_text("---\nid: x\ntitle: y\ntrigger: {experiment: nope.yaml}\nchecks: []\n---\n")
    with pytest.raises(SpecError) as info:
        load_runbook(bad)
    assert any(p.startswith("checks") for p in info.value.problems)


def test_cases_are_loaded_after_the_main_form_and_a_missing_experiment_is_named(tmp_path: Path) -> None:
    runbook, _ = load_runbook(RUNBOOKS / "remediation-controller-failure.md")
    forms = runbook.forms()
    assert forms[0].name == "" and forms[1].name.startswith("the leader cut off from the network")
    assert forms[0].trigger == runbook.trigger and forms[1].trigger.experiment.name == "controller-leader-isolated.yaml"
    assert forms[1].trigger.experiment.is_absolute() and forms[1].trigger.max_faults == 2
    text = (RUNBOOKS / "remediation-controller-failure.md").read_text()
    text = text.replace("experiment: ../chaos/", f"experiment: {RUNBOOKS.parent}/chaos/", 1)
    broken = tmp_path / "broken.md"
    broken.write_text(text.replace("../chaos/experiments/controller-leader-isolated.yaml", "gone.yaml"))
    with pytest.raises(SpecError) as info:
        load_runbook(broken)
    assert info.value.problems[0].startswith("cases.0.trigger.experiment:")


def test_every_shipped_runbook_loads_with_its_sections_and_experiment() -> None:
    folder = Path(__file__).resolve().parents[2] / "runbooks"
    books = sorted(p for p in folder.glob("*.md") if p.name != "README.md")
    assert len(books) == 10
    for path in books:
        runbook, _body = load_runbook(path)
        assert runbook.trigger.experiment.exists() and runbook.checks, path.name


def test_placeholders_of_a_cluster_over_ssh(tmp_path: Path) -> None:
    """`run` as an engineer types it, filled from the inventory: the ssh that reaches the host, its ha-ops."""
    from ha_ops.cluster.inventory import Inventory, InventoryHost
    from ha_ops.cluster.ssh import SshCluster
    from ha_ops.runbooks.placeholders import fill
    from ha_ops.spec import load_spec

    spec_file = RUNBOOKS.parent / "examples" / "lab.yaml"
    ctl1 = InventoryHost(name="ctl1", address="10.0.100.11", user="ops", port=2222, become=True,
                         key_file=Path("/keys/ops"), known_hosts=Path("/etc/ha-ops/known_hosts"),
                         ha_ops_command="/opt/ha-ops/bin/ha-ops")  # fmt: skip
    cluster = SshCluster(load_spec(spec_file), Inventory(source=tmp_path / "hosts.yml", hosts={"ctl1": ctl1}),
                         journal_dir=tmp_path, spec_file=spec_file)  # fmt: skip
    values = cluster.placeholders()
    command = fill("{ssh:ctl1} {on:ctl1} controller status --url http://{address:ctl1}:8800", values)
    assert command == (
        "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/ha-ops/known_hosts "
        "-o ConnectTimeout=10 -p 2222 -i /keys/ops ops@10.0.100.11 sudo -n /opt/ha-ops/bin/ha-ops controller status "
        f"--url http://{cluster.layout.node('ctl1').address}:8800"
    )
    assert fill("{ha_ops} spec validate {spec}", values).endswith(f"-m ha_ops spec validate {spec_file}")
    with pytest.raises(KeyError, match="ssh:gpu9"):
        fill("{ssh:gpu9} true", values)  # not a host of the inventory
    with pytest.raises(KeyError, match="root"):
        fill("ls {root}", values)  # a lab-only placeholder


def test_a_manual_step_runs_its_lab_run_only_in_the_lab(tmp_path: Path) -> None:
    from ha_ops.runbooks.verify import ManualStep, _run_manual

    class Real:
        name = "prod"

        def placeholders(self) -> dict[str, object]:
            return {"cluster": "prod"}

    class Lab(Real):
        lab = object()  # the lab's extension marks it

    step = ManualStep(step="say where", run=f"echo real > {tmp_path}/said", lab_run=f"echo lab > {tmp_path}/said")
    real = _run_manual(step, Real())  # type: ignore[arg-type]
    assert real.ok and real.as_written and (tmp_path / "said").read_text() == "real\n"
    lab = _run_manual(step, Lab())  # type: ignore[arg-type]
    assert lab.ok and not lab.as_written and (tmp_path / "said").read_text() == "lab\n"
    missing = _run_manual(ManualStep(step="x", run="ls {root}"), Real())  # type: ignore[arg-type]
    assert not missing.ok and "prod gives no value for 'root'" in missing.detail


def test_every_shipped_step_as_written_names_only_what_a_real_cluster_has(tmp_path: Path) -> None:
    """Each `run` fills from an inventory and a spec alone: no lab folder, no lab tool (those belong in lab_run)."""
    from ha_ops.cluster.inventory import Inventory, InventoryHost
    from ha_ops.cluster.ssh import SshCluster
    from ha_ops.runbooks.placeholders import fill
    from ha_ops.spec import compute_layout, load_spec

    spec_file = RUNBOOKS.parent / "examples" / "lab-storage.yaml"
    spec = load_spec(spec_file)
    hosts = {n.name: InventoryHost(name=n.name, address=f"10.0.100.{i + 10}")
             for i, n in enumerate(compute_layout(spec).nodes)}  # fmt: skip
    hosts |= {s: InventoryHost(name=s, address=f"10.0.101.{i + 10}") for i, s in enumerate(["leaf1", "leaf2"])}
    cluster = SshCluster(spec, Inventory(source=tmp_path / "hosts.yml", hosts=hosts), journal_dir=tmp_path)
    values = cluster.placeholders()
    for path in sorted(RUNBOOKS.glob("*-*.md")):
        runbook, _ = load_runbook(path)
        for step in runbook.manual:
            command = fill(step.run, values)
            assert "ha_ops lab " not in command and "hao-" not in command, (path.name, step.step)
