"""Pod Security admission for the Kubernetes layer (issue 44, finding 11): the controllers' namespace is labelled
`restricted`, the agents' the least they need, each pod meets its namespace's level, and the checker that makes sure
of it at render time names what a level refuses. The lab applies the same objects against the API server's own
admission (tests/integration/test_kubernetes.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from ha_ops.errors import SpecError
from ha_ops.iac import k8s_manifests as m
from ha_ops.iac.pod_security import looser, namespace_labels, problems_at, restricted_problems
from tests.unit.iac_specs import AGENT_IMAGE, CONTROLLER_IMAGE, example

SPEC = example("production.yaml")
IMAGES = m.Images(agent=AGENT_IMAGE, controller=CONTROLLER_IMAGE)


def objects(cfg: m.K8sLayerConfig) -> list[m.LayerObject]:
    return m.layer_objects(SPEC, cfg, m.default_controller_config(SPEC, cfg), IMAGES, source="test")


def namespaces(cfg: m.K8sLayerConfig) -> dict[str, dict[str, str]]:
    return {o.name: o.manifest["metadata"]["labels"] for o in objects(cfg) if o.kind == "Namespace"}


def pod(cfg: m.K8sLayerConfig, kind: str) -> tuple[str, dict[str, Any]]:
    [found] = [o.manifest for o in objects(cfg) if o.kind == kind]
    return found["metadata"]["namespace"], found["spec"]["template"]["spec"]


def test_with_nvml_both_namespaces_are_restricted_and_every_pod_meets_it() -> None:
    cfg = m.K8sLayerConfig()
    labels = namespaces(cfg)
    assert set(labels) == {"ha-ops", "ha-ops-agent"}
    for name in labels:
        assert labels[name]["pod-security.kubernetes.io/enforce"] == "restricted", name
        assert labels[name]["pod-security.kubernetes.io/warn"] == "restricted", name
    for kind, namespace in (("DaemonSet", "ha-ops-agent"), ("Deployment", "ha-ops")):
        where, spec = pod(cfg, kind)
        assert where == namespace and restricted_problems(spec) == [], kind


def test_a_labs_fake_gpus_make_the_agents_namespace_privileged_and_never_the_controllers() -> None:
    cfg = m.K8sLayerConfig(agent_fake_gpus_dir="/run/ha-ops-node/gpus")
    labels = namespaces(cfg)
    assert labels["ha-ops-agent"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["ha-ops"]["pod-security.kubernetes.io/enforce"] == "restricted"
    _, agent = pod(cfg, "DaemonSet")
    assert restricted_problems(agent) == ["volumes[1].hostPath (fake-gpus)"]  # that volume alone
    # One namespace for both: the looser level, said on the one namespace.
    shared = namespaces(m.K8sLayerConfig(agent_fake_gpus_dir="/run/g", agent_namespace="ha-ops"))
    assert list(shared) == ["ha-ops"] and shared["ha-ops"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_the_agent_runs_as_the_images_user_without_capabilities_and_is_probed() -> None:
    _, spec = pod(m.K8sLayerConfig(), "DaemonSet")
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == m.IMAGE_UID
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    [container] = spec["containers"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe
    assert container["livenessProbe"]["failureThreshold"] * container["livenessProbe"]["periodSeconds"] >= 60


def test_the_agents_account_and_the_pod_monitor_follow_the_agents_namespace() -> None:
    cfg = m.K8sLayerConfig(agent_namespace="gpu-watch")
    config = m.controller_config(SPEC, cfg, "gpu", ["gpu1"])
    account = config["certificates"]["enrollment"]["agent_service_account"]
    assert account == "system:serviceaccount:gpu-watch:ha-ops-agent"
    [monitor] = [o.manifest for o in objects(cfg) if o.kind == "PodMonitor"]
    assert monitor["metadata"]["namespace"] == "gpu-watch"  # beside the CA's ConfigMap it reads
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-watch", "ha-ops"]}
    with pytest.raises(ValueError, match="agent_namespace"):
        m.K8sLayerConfig(agent_namespace="Not_A_Name")


BAD_POD: dict[str, Any] = {
    "hostNetwork": True,
    "volumes": [{"name": "dev", "hostPath": {"path": "/dev"}}, {"name": "nfs", "nfs": {"server": "x", "path": "/"}}],
    "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}],
                    "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}}],
}  # fmt: skip


def test_the_checker_names_what_each_level_refuses() -> None:
    baseline = problems_at("baseline", BAD_POD)
    assert baseline == ["hostNetwork: true", "volumes[0].hostPath (dev)",
                        "containers[0].securityContext.privileged: true",
                        "containers[0].securityContext.capabilities.add: SYS_ADMIN",
                        "containers[0].ports[0].hostPort"]  # fmt: skip
    restricted = problems_at("restricted", BAD_POD)
    assert set(baseline) < set(restricted)
    for field in ("volumes[1] (nfs): type nfs", "allowPrivilegeEscalation", "runAsNonRoot", "seccompProfile",
                  "capabilities.drop", "capabilities.add: CHOWN"):  # fmt: skip
        assert any(field in p for p in restricted), field
    assert problems_at("privileged", BAD_POD) == []
    # A container's own setting overrides the pod's.
    good = copy.deepcopy(pod(m.K8sLayerConfig(), "Deployment")[1])
    good["containers"][0]["securityContext"]["runAsNonRoot"] = False
    assert restricted_problems(good) == ["containers[0]: runAsNonRoot must be true (the pod's or the container's "
                                         "securityContext)"]  # fmt: skip


def test_a_pod_its_namespace_would_refuse_is_refused_at_render_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rooted = m.NON_ROOT | {"runAsNonRoot": False}
    monkeypatch.setattr(m, "NON_ROOT", rooted)  # a change to the pods that restricted does not admit
    with pytest.raises(SpecError) as info:
        objects(m.K8sLayerConfig())
    assert "the agent in ha-ops-agent (Pod Security restricted): containers[0]: runAsNonRoot" in str(info.value)


def test_levels_and_labels() -> None:
    assert looser("restricted", "privileged") == "privileged" and looser("restricted", "baseline") == "baseline"
    assert namespace_labels("restricted")["pod-security.kubernetes.io/enforce-version"] == "latest"
    with pytest.raises(ValueError, match="not a Pod Security level"):
        namespace_labels("strict")
