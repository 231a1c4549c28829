"""Secure by default (issue 44, finding 4): every shipped spec, role default, Kubernetes manifest and the lab serve
the controllers' API over mutual TLS, and plain HTTP is only where a config says `insecure: true` (never with
`production: true`). The controller and the agent refusing a file without either: test_controller_cli.py,
test_agent_cli.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ha_ops.errors import SpecError
from ha_ops.health.config import AgentConfig
from ha_ops.iac.k8s_manifests import K8sLayerConfig, agent_config_yaml, controller_config
from ha_ops.lab import agents, controllers
from ha_ops.lab.context import LabContext
from ha_ops.lab.paths import LabPaths
from ha_ops.remediation.config import ControllerConfig
from ha_ops.spec import compute_layout, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(REPO.glob("examples/*.yaml"))
ROLE_TLS = {"ha_ops_controller": "ha_ops_controller_tls", "ha_ops_agent": "ha_ops_agent_controller_tls"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_shipped_spec_with_controllers_serves_them_over_tls(path: Path) -> None:
    spec = load_spec(path)
    if spec.remediation is not None:
        assert spec.remediation.tls and not spec.remediation.insecure


@pytest.mark.parametrize(("role", "variable"), sorted(ROLE_TLS.items()))
def test_every_role_default_is_mutual_tls_with_the_pki_roles_files(role: str, variable: str) -> None:
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())
    files = defaults[variable]
    assert sorted(files) == ["ca_file", "cert_file", "key_file"]
    assert all(str(f).startswith("/etc/ha-ops/pki/") for f in files.values())  # (roles/ha_ops_pki's ha_ops_pki_dest)
    insecure = variable.replace("_tls", "_insecure")
    assert defaults[insecure] is False


def test_the_kubernetes_layers_default_is_mutual_tls_and_plain_http_must_be_meant() -> None:
    spec = load_spec(REPO / "examples" / "lab-k8s.yaml")
    layer = K8sLayerConfig()
    controller = ControllerConfig.model_validate(controller_config(spec, layer, "gpu", ["gpu1"]))
    agent = AgentConfig.model_validate(yaml.safe_load(agent_config_yaml(spec, layer)))
    assert controller.tls is not None and not controller.insecure
    assert agent.controller.tls is not None and not agent.controller.insecure
    assert all(u.startswith("https://") for u in agent.controller.urls)
    with pytest.raises(ValueError, match="issuer_secret: null serves the controllers' API over plain HTTP"):
        K8sLayerConfig(issuer_secret=None)


@pytest.mark.parametrize("name", ["lab.yaml", "lab-storage.yaml", "lab-k8s.yaml"])
def test_the_lab_serves_and_reports_over_tls(name: str, tmp_path: Path) -> None:
    spec = load_spec(REPO / "examples" / name)
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path))
    controller = ControllerConfig.model_validate(controllers.render_config(ctx, spec.controllers.hosts[0].name))
    gpu = ctx.layout.nodes_with_role("gpu")[0].name
    agent = AgentConfig.model_validate(agents.render_config(ctx, gpu, True))
    assert controller.tls is not None and not controller.insecure
    assert agent.controller.tls is not None and not agent.controller.insecure


def _lab_with_remediation(**change: object) -> dict:
    data = copy.deepcopy(yaml.safe_load((REPO / "examples" / "lab.yaml").read_text()))
    data["remediation"].pop("tls", None)
    data["remediation"].update(change)
    return data


def test_a_spec_is_tls_unless_it_says_insecure_and_never_insecure_in_production() -> None:
    assert parse_spec(_lab_with_remediation()).remediation.tls is True  # (the default)  # type: ignore[union-attr]
    with pytest.raises(SpecError) as plain:
        parse_spec(_lab_with_remediation(tls=False))
    assert any(p.startswith("remediation: ") and "set insecure: true" in p for p in plain.value.problems)
    meant = parse_spec(_lab_with_remediation(tls=False, insecure=True))
    assert meant.remediation is not None and not meant.remediation.tls
    with pytest.raises(SpecError) as production:
        parse_spec({**_lab_with_remediation(tls=False, insecure=True), "production": True})
    assert any(p.startswith("remediation.insecure: ") for p in production.value.problems)
