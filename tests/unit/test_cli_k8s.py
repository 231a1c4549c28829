"""`ha-ops k8s render`: the layer as a Kustomize base from the spec, written whole or not at all, and refusals that
name the bad field (exit 2) with nothing written. (tests/integration/test_k8s_install_paths.py builds the base with
kustomize and compares it with what Pulumi renders.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ha_ops.iac.k8s_manifests import KUSTOMIZATION
from tests.unit.cli_helpers import run_main
from tests.unit.iac_specs import AGENT_IMAGE, CONTROLLER_IMAGE, EXAMPLES, example_data


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(example_data("production.yaml") | {
        "images": {"agent": AGENT_IMAGE, "controller": CONTROLLER_IMAGE}}))  # fmt: skip
    return path


def test_the_base_lists_every_object_once_in_its_own_file(
    spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "base"
    assert run_main(monkeypatch, "k8s", "render", str(spec_file), "--out", str(out), "--json") == 0
    made = json.loads(capsys.readouterr().out)
    kustomization = yaml.safe_load((out / KUSTOMIZATION).read_text())
    assert kustomization["kind"] == "Kustomization" and sorted(kustomization["resources"]) == sorted(
        f for f in made["files"] if f != KUSTOMIZATION)  # fmt: skip
    objects = [yaml.safe_load((out / f).read_text()) for f in kustomization["resources"]]
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [(o["kind"], o["name"]) for o in made["objects"]]
    assert objects[0]["kind"] == "Namespace"  # applied first
    [deploy] = [o for o in objects if o["kind"] == "Deployment"]
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == CONTROLLER_IMAGE
    [config] = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "ha-ops-controller"]
    controller = yaml.safe_load(config["data"]["controller.yaml"])
    assert controller["scheduler"] == "kubernetes" and len(controller["pools"]["gpu"]["nodes"]) > 0


def test_a_render_replaces_an_earlier_one_and_leaves_no_stale_file(
    spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "base"
    assert run_main(monkeypatch, "k8s", "render", str(spec_file), "--out", str(out)) == 0
    assert (out / "podmonitor-ha-ops.yaml").exists()
    layer = tmp_path / "layer.yaml"
    layer.write_text("prometheus_operator: false\nnamespace: gpu-ha\n")
    assert run_main(monkeypatch, "k8s", "render", str(spec_file), "--out", str(out), "--layer", str(layer)) == 0
    assert not (out / "podmonitor-ha-ops.yaml").exists()  # the Operator's objects went with the option
    assert yaml.safe_load((out / "namespace-gpu-ha.yaml").read_text())["metadata"]["name"] == "gpu-ha"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "layer.yaml", "spec.yaml"]  # no staging left


@pytest.mark.parametrize(("case", "problem"), [
    ("no-images", "images: no images given (the spec has none"),
    ("tagged-image", "images.agent"),
    ("bad-layer", "controller_replicas"),
    ("not-ours", "--out: not empty and not an earlier render"),
])  # fmt: skip
def test_bad_input_is_named_and_nothing_is_written(
    case: str, problem: str, spec_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    out = tmp_path / "base"
    args = ["k8s", "render", str(spec_file), "--out", str(out)]
    if case == "no-images":
        args[2] = str(EXAMPLES / "production.yaml")
    elif case == "tagged-image":
        spec_file.write_text(spec_file.read_text().replace(AGENT_IMAGE, "registry.example/ha-ops/agent:1.0"))
    elif case == "bad-layer":
        (tmp_path / "layer.yaml").write_text("controller_replicas: 1\n")
        args += ["--layer", str(tmp_path / "layer.yaml")]
    else:
        out.mkdir()
        (out / "mine.yaml").write_text("kind: Something\n")
    assert run_main(monkeypatch, *args) == 2
    assert problem in capsys.readouterr().err
    assert (not out.exists()) if case != "not-ours" else [p.name for p in out.iterdir()] == ["mine.yaml"]
