"""GPU fault injection: DCGM's commands and how their output is judged, and the fake backend over its CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from ha_ops.cluster.gpu import CapabilityMissing, DcgmInjector, FakeBackendInjector, check_dcgmi_output
from ha_ops.cluster.ops import GpuOp
from ha_ops.errors import HaOpsError
from ha_ops.gpu.fake import FakeGpus
from tests.unit.cli_helpers import run_main


def test_dcgm_injects_the_field_of_each_fault() -> None:
    dcgm = DcgmInjector(gpus=2)

    def argv(**kw: object) -> list[list[str]]:
        return [list(c.argv) for c in dcgm.commands(GpuOp(host="gpu1", **kw))]  # type: ignore[arg-type]

    assert argv(fault="xid", gpu=3, xid=48) == [["dcgmi", "test", "--inject", "--gpuid", "3", "-f", "230", "-v", "48"]]
    assert argv(fault="fallen_off_bus", gpu=0)[0][-4:] == ["-f", "230", "-v", "79"]
    assert argv(fault="double_bit_ecc", gpu=0)[0][-4:] == ["-f", "311", "-v", "1"]
    assert argv(fault="row_remap_failure", gpu=0)[0][-4:] == ["-f", "395", "-v", "1"]
    assert argv(fault="overheat", gpu=1, celsius=95.5)[0][-4:] == ["-f", "150", "-v", "95.5"]
    cleared = argv(fault="clear")
    assert len(cleared) == 2 * 4  # every GPU, every field back to its healthy value
    assert {tuple(a[-4:]) for a in cleared} >= {("-f", "230", "-v", "0"), ("-f", "150", "-v", "40")}
    with pytest.raises(CapabilityMissing, match="permanent"):
        argv(fault="xid", gpu=0, permanent=True)


def test_dcgmi_output_decides_whether_it_took() -> None:
    check_dcgmi_output("Successfully injected field info.\n")
    with pytest.raises(HaOpsError, match="Error: Unable to inject"):
        check_dcgmi_output("Error: Unable to inject info. Return: The GPU is not supported\n")
    with pytest.raises(HaOpsError, match="no output"):
        check_dcgmi_output("")


def test_fake_backend_commands_run_ha_ops_on_the_node() -> None:
    fake = FakeBackendInjector("/var/lib/ha-ops/fake-gpus", "/opt/ha-ops/bin/python -m ha_ops")
    (inject,) = fake.commands(GpuOp(host="gpu1", fault="xid", gpu=2, xid=79, permanent=True))
    assert list(inject.argv) == ["/opt/ha-ops/bin/python", "-m", "ha_ops", "gpu", "fake-fault", "--fake-dir",
                                 "/var/lib/ha-ops/fake-gpus", "--gpu", "2", "--fault", "xid", "--xid", "79",
                                 "--permanent"]  # fmt: skip
    (clear,) = fake.commands(GpuOp(host="gpu1", fault="clear"))
    assert list(clear.argv)[-3:] == ["fake-clear", "--fake-dir", "/var/lib/ha-ops/fake-gpus"]


def test_fake_fault_and_clear_commands_change_the_fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeGpus.create(tmp_path, "gpu1", 2)
    fake = FakeGpus(tmp_path)
    assert run_main(monkeypatch, "gpu", "fake-fault", "--fake-dir", str(tmp_path), "--gpu", "1",
                    "--fault", "fallen_off_bus", "--permanent") == 0  # fmt: skip
    assert fake.state(1)["lost"] is True and fake.state(1)["sticky"] is True
    assert fake.reset(1) == []  # permanent: a reset does not repair it
    assert run_main(monkeypatch, "gpu", "fake-clear", "--fake-dir", str(tmp_path), "--gpu", "1") == 0
    assert not fake.state(1).get("lost")
    assert run_main(monkeypatch, "gpu", "fake-fault", "--fake-dir", str(tmp_path), "--gpu", "9") == 2
    assert run_main(monkeypatch, "gpu", "fake-fault", "--fake-dir", str(tmp_path), "--gpu", "0",
                    "--fault", "melted") == 2  # fmt: skip
    assert run_main(monkeypatch, "gpu", "fake-clear", "--fake-dir", str(tmp_path / "none")) == 2
