"""The lab's real kubelet nodes: what the spec allows, and each node's configuration (ha_ops/lab/kubelets.py)."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from ha_ops.errors import SpecError
from ha_ops.lab import controllers, kubelets, kubernetes
from ha_ops.lab.context import LabContext
from ha_ops.lab.paths import LabPaths
from ha_ops.lab.process import with_descendants
from ha_ops.remediation.config import ControllerConfig
from ha_ops.spec import compute_layout, load_spec, parse_spec

LAB_YAML = Path(__file__).resolve().parents[2] / "examples" / "lab.yaml"


def spec_with(kubelet_nodes: list[str]) -> Any:
    data = copy.deepcopy(yaml.safe_load(LAB_YAML.read_text()))
    data["kubernetes"] = {"kubelet_nodes": kubelet_nodes}
    return parse_spec(data, "lab-variant")


@pytest.mark.parametrize(("names", "problem"), [
    (["nosuch"], "kubernetes.kubelet_nodes[0]: 'nosuch' is not a host of the spec"),
    (["ctl1", "ctl1"], "kubernetes.kubelet_nodes: 'ctl1' is named twice"),
])  # fmt: skip
def test_kubelet_nodes_must_be_hosts_of_the_spec_named_once(names: list[str], problem: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec_with(names)
    assert problem in caught.value.problems


def test_each_kubelet_node_gets_its_own_pod_subnet_runtime_and_labels(tmp_path: Path) -> None:
    spec = spec_with(["ctl1", "ctl2"])
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path / "lab"))
    subnets = [kubelets.pod_subnet(ctx, n) for n in ("ctl1", "ctl2")]
    assert [str(s) for s in subnets] == ["10.245.0.0/24", "10.245.1.0/24"]
    assert kubelets.runtime_socket(ctx, "ctl1") != kubelets.runtime_socket(ctx, "ctl2")
    assert len(str(kubelets.runtime_socket(ctx, "ctl1"))) < 108  # a Unix socket path's limit
    labels = kubelets.labels(ctx, "ctl1")
    assert labels["ha-ops.io/controller"] == "true" and labels[kubelets.LAB_LABEL] == "true"
    assert labels["topology.kubernetes.io/zone"] == spec.domain(spec.controllers.hosts[0].domain).zone
    assert kubernetes.service_ip(ctx) == "10.96.0.1"
    assert kubelets.api_nodes(ctx) == ["ctl1", "ctl2"]  # (the controllers act on Slurm here)


def test_controllers_on_kubernetes_reach_the_api_through_the_relay_as_their_own_user(tmp_path: Path) -> None:
    """examples/lab-k8s.yaml: the controllers' nodes get the Service address and the relay, and each controller's
    configuration is the Kubernetes one (a valid ControllerConfig: lease and state in the API, no state folder, no
    Slurm fence)."""
    spec = load_spec(LAB_YAML.parent / "lab-k8s.yaml")
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path / "lab"))
    assert kubernetes.controllers_use_it(ctx) and kubelets.names(ctx) == []
    assert kubelets.api_nodes(ctx) == ["ctl1", "ctl2"]
    [relay] = kubelets.relay_services(ctx)
    assert relay.node == "host" and f"{ctx.netns('ctl2')}=10.96.0.1:443" in relay.argv
    config = ControllerConfig.model_validate(controllers.render_config(ctx, "ctl1"))
    assert config.scheduler == "kubernetes" and config.state_dir is None  # (the Slurm fence is off on Kubernetes)
    assert config.kubernetes is not None and config.kubernetes.lease is not None and config.kubernetes.state is not None
    assert config.kubernetes.kubeconfig == kubernetes.controller_kubeconfig_path(ctx)
    assert config.kubernetes.lease.namespace == kubernetes.CONTROLLER_NAMESPACE
    # The Slurm lab keeps its controllers on Slurm, with their shared folder and fence.
    slurm_ctx = LabContext(spec_with([]), compute_layout(spec_with([])), LabPaths(tmp_path / "slurm"))
    slurm_config = ControllerConfig.model_validate(controllers.render_config(slurm_ctx, "ctl1"))
    assert slurm_config.scheduler == "slurm" and slurm_config.state_dir and slurm_config.slurm_fence.power_off_command
    assert kubelets.api_nodes(slurm_ctx) == [] and kubelets.relay_services(slurm_ctx) == []


def test_descendants_are_found_below_the_given_processes() -> None:
    """What `lab down` kills beside a node's own processes: a container's, children of its containerd shim."""
    child = "import time; time.sleep(30)"
    script = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 10
        while len(found := with_descendants([parent.pid])) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert found[0] == parent.pid and len(found) == 2
        assert os.getpid() not in found
    finally:
        for pid in reversed(found):
            os.kill(pid, 9)
        parent.wait(5)


def test_a_gpu_node_with_a_kubelet_registers_as_kwok_would_have_it_and_is_tainted_for_the_agent_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ha_ops.lab import kubernetes

    monkeypatch.setattr(kubelets, "tool", lambda name: Path("/tools") / name)  # `make check` needs no Go build

    spec = spec_with(["ctl1", "gpu4"])
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path / "lab"))
    gpu4 = ctx.layout.node("gpu4")
    kwok_labels = kubernetes.node_object(gpu4, kubernetes.domain_labels(ctx, gpu4.domain), "gpu")["metadata"]["labels"]
    labels = kubelets.labels(ctx, "gpu4")
    # (set by kubelet; and KWOK's own, which a real kubelet's node must not carry)
    kubelets_own = ("type", "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch", kubernetes.KWOK_LABEL)
    assert {k: v for k, v in kwok_labels.items() if k not in kubelets_own}.items() <= labels.items()
    assert kubelets.taints(ctx, "gpu4")[0] == kubelets.LAB_TAINT and kubelets.taints(ctx, "ctl1") == []
    assert ("ha-ops.io/spare" in labels) == gpu4.spare
    assert kubelets.gpu_capacity_patch(ctx, "gpu4") == {"status": {
        "capacity": {"nvidia.com/gpu": str(gpu4.gpus)}, "allocatable": {"nvidia.com/gpu": str(gpu4.gpus)}}}  # fmt: skip
    assert kubelets.gpu_capacity_patch(ctx, "ctl1") is None
    # KWOK leaves it to its kubelet; its neighbours stay KWOK's.
    assert "gpu4" not in {n["metadata"]["name"] for n in kubernetes.gpu_nodes(ctx)}
    assert {"gpu1", "gpu2", "gpu3"} <= {n["metadata"]["name"] for n in kubernetes.gpu_nodes(ctx)}
    argv = next(s.argv for s in kubelets.kubelet_services(ctx) if s.node == "gpu4")
    assert f"--register-with-taints={kubelets.LAB_LABEL}=true:NoSchedule" in ",".join(argv)


def test_the_lab_pods_addresses_are_inside_the_specs_pod_cidr_which_the_firewalls_let_in(tmp_path: Path) -> None:
    """The host firewalls take the pods' traffic to the hosts' services from kubernetes.pod_cidr: the lab's real
    pods (kubelets.POD_CIDR) must be inside it, and each kubelet node also takes the relay's port from them."""
    from ha_ops.lab import firewall

    spec = load_spec(LAB_YAML.parent / "lab-k8s.yaml")
    assert spec.kubernetes is not None and spec.firewall is not None
    assert kubelets.POD_CIDR.subnet_of(spec.kubernetes.pod_cidr)
    spec = spec.model_copy(update={"kubernetes": spec.kubernetes.model_copy(update={"kubelet_nodes": ["gpu1"]})})
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path / "lab"))
    relay = [r for r in firewall.rules(ctx, "gpu1") if r.ports == (443, 443)]
    assert [r.sources for r in relay] == [(str(spec.kubernetes.pod_cidr),)]
    assert not [r for r in firewall.rules(ctx, "gpu2") if r.ports == (443, 443)]  # KWOK's: no pods of its own


def test_the_lab_audit_sink_lets_in_the_layers_controller_pods_by_their_services_name(tmp_path: Path) -> None:
    """The layer's controller pods ship with certificates naming their Service: the lab's rsyslog must permit that
    name beside the controller hosts', and only with Kubernetes."""
    from ha_ops.lab import audit_sink

    spec = load_spec(LAB_YAML.parent / "lab-k8s.yaml")
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path / "lab"))
    assert 'permittedPeer=["ctl1", "ctl2", "ha-ops-controller.ha-ops.svc"]' in audit_sink.render_config(ctx)
    plain = load_spec(LAB_YAML)
    plain_ctx = LabContext(plain, compute_layout(plain), LabPaths(tmp_path / "plain"))
    assert 'permittedPeer=["ctl1", "ctl2"]' in audit_sink.render_config(plain_ctx)
