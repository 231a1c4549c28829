"""The two install paths of the Kubernetes layer give the same objects: infra/k8s, run by the built Pulumi CLI and
pulumi-kubernetes provider in render mode (the manifests it would apply, written to a folder), and the Kustomize
base `ha-ops k8s render` writes, built by the real kustomize in the built kubectl."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ha_ops.iac.engine import PulumiEngine

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[2]
KUBECTL = REPO / "tools" / "bin" / "kubectl"
IMAGES = {"agent": f"registry.invalid/ha-ops/agent@sha256:{'1' * 64}",
          "controller": f"registry.invalid/ha-ops/controller@sha256:{'2' * 64}"}  # fmt: skip


def _key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


def test_pulumi_and_the_kustomize_base_make_the_same_objects(tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "examples" / "production.yaml").read_text()) | {"images": IMAGES}
    spec_file = tmp_path / "production.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    layer = {"controller_node_selector": {"node-role.example.com/system": "true"}}
    (tmp_path / "layer.yaml").write_text(yaml.safe_dump(layer))

    # Pulumi: the stack as users run it, rendering instead of applying.
    engine = PulumiEngine(tmp_path / "state")
    program = REPO / "infra" / "k8s"
    engine.select_stack(program, "render")
    engine.set_config(program, "render", {"spec": str(spec_file), "render_dir": str(tmp_path / "pulumi"),
                                          "layer": json.dumps(layer)})  # fmt: skip
    update = engine.up(program, "render")
    assert update["result"] == "succeeded", update
    by_pulumi = [d for f in sorted((tmp_path / "pulumi").rglob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
                 if d]  # fmt: skip

    # Kustomize: the base from the CLI, built by kustomize.
    base = tmp_path / "base"
    rendered = subprocess.run([sys.executable, "-m", "ha_ops", "k8s", "render", str(spec_file), "--out", str(base),
                               "--layer", str(tmp_path / "layer.yaml"), "--json"],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    built = subprocess.run([str(KUBECTL), "kustomize", str(base)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    by_kustomize = [d for d in yaml.safe_load_all(built.stdout) if d]

    pulumi_objects = {_key(o): o for o in by_pulumi}
    kustomize_objects = {_key(o): o for o in by_kustomize}
    assert len(pulumi_objects) == len(by_pulumi) and len(kustomize_objects) == len(by_kustomize)  # no duplicates
    assert sorted(pulumi_objects) == sorted(kustomize_objects)
    kinds = {k[1] for k in kustomize_objects}
    assert {"DaemonSet", "Deployment", "ClusterRole", "NetworkPolicy", "PrometheusRule", "PodMonitor"} <= kinds
    for key, obj in kustomize_objects.items():  # field for field: nothing added, dropped or respelt
        assert pulumi_objects[key] == obj, key
    assert len(json.loads(rendered.stdout)["objects"]) == len(kustomize_objects)
