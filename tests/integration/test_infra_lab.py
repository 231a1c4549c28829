"""The lab stack (infra/lab): `pulumi up` with the locally built CLI and a file backend leaves a running lab built
from the spec, a second `up` reports no changes, and `pulumi destroy` removes every trace of it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ha_ops.iac.engine import PulumiEngine
from ha_ops.lab.cluster import Lab
from tests.labkit import REPO, lab_spec, leftovers

pytestmark = [pytest.mark.lab, pytest.mark.tools]  # the lab, and the Go-built tools

LAB_NAME = "itpulumi"  # the lab this module builds: the suite checks nothing of it is left (conftest)
PROGRAM = REPO / "infra" / "lab"


def test_pulumi_up_builds_the_lab_a_second_up_changes_nothing_and_destroy_removes_it(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(lab_spec(LAB_NAME).model_dump(mode="json"), sort_keys=False))
    engine = PulumiEngine(tmp_path / "state")
    engine.select_stack(PROGRAM, "lab")
    engine.set_config(PROGRAM, "lab", {"spec": str(spec_file)})
    try:
        first = engine.up(PROGRAM, "lab")
        assert first["result"] == "succeeded" and first["resourceChanges"] == {"create": 2}, first
        status = Lab.from_state(LAB_NAME).status()
        assert status["healthy"], status["problems"]
        outputs = engine.outputs(PROGRAM, "lab")
        assert outputs["lab"] == LAB_NAME and set(outputs["nodes"]) >= {"ctl1", "ctl2", "gpu1", "gpu4"}
        again = engine.up(PROGRAM, "lab")
        assert again["resourceChanges"] == {"same": 2}, again
    finally:
        gone = engine.destroy(PROGRAM, "lab")
    assert gone["result"] == "succeeded" and gone["resourceChanges"] == {"delete": 2}, gone
    assert leftovers(LAB_NAME) == []
