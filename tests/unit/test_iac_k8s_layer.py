"""ClusterK8sLayer under Pulumi mocks: the Kubernetes objects ha-ops needs, each checked for what makes it highly
available or safe, and refused (nothing created) when an image is not pinned by digest."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from ha_ops.errors import SpecError
from ha_ops.health.config import AgentConfig
from ha_ops.iac.components import ClusterK8sLayer, ClusterK8sLayerArgs, K8sLayerConfig
from ha_ops.iac.violations import PolicyViolationError
from ha_ops.monitoring.rules import rules_yaml
from ha_ops.spec.model import ClusterSpec, Images
from tests.unit.iac_harness import Harness, Registered
from tests.unit.iac_specs import AGENT_IMAGE, CONTROLLER_IMAGE, changed, example

CONTROLLER_CONFIG = "id: ctl\nstate_dir: /var/lib/ha-ops/controller\npools: {gpu: {nodes: [gpu1, gpu2]}}\n"
IMAGES = Images(agent=AGENT_IMAGE, controller=CONTROLLER_IMAGE)


@pytest.fixture
def mocks() -> Harness:
    return Harness.install()


def build(mocks: Harness, spec: ClusterSpec | None = None, **args: Any) -> ClusterK8sLayer:
    spec = spec or example("production.yaml")
    layer_args = ClusterK8sLayerArgs(spec, CONTROLLER_CONFIG, **({"images": IMAGES} | args))
    layer = mocks.run(lambda: ClusterK8sLayer("ha", layer_args))
    assert isinstance(layer, ClusterK8sLayer)
    return layer


def obj(mocks: Harness, kind: str, name: str) -> dict[str, Any]:
    """The inputs of the Kubernetes object of `kind` whose metadata.name is `name`."""
    found = [r for r in mocks.resources if r.type.endswith(f":{kind}") and r.inputs["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)}"
    return found[0].inputs


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Kubernetes label selector semantics (matchLabels, In/Exists expressions); {} selects everything."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        if expr["operator"] == "In" and labels.get(expr["key"]) not in expr["values"]:
            return False
        if expr["operator"] == "Exists" and expr["key"] not in labels:
            return False
    return True


def test_everything_is_created_under_the_component_with_its_outputs(mocks: Harness) -> None:
    build(mocks)
    component = mocks.one("haops:kubernetes:ClusterK8sLayer", "ha")
    children = [r for r in mocks.resources if r != component]
    assert children and all(mocks.parent(r) == component for r in children)
    kinds = sorted(r.type for r in children)
    assert kinds.count("kubernetes:networking.k8s.io/v1:NetworkPolicy") == 11  # 6 for the controllers, 5 the agents
    assert kinds.count("kubernetes:scheduling.k8s.io/v1:PriorityClass") == 3
    assert kinds.count("kubernetes:core/v1:Namespace") == 2  # the controllers' and the agents'
    for kind in ["DaemonSet", "Deployment", "Role", "RoleBinding", "PodDisruptionBudget", "Service"]:
        assert sum(t.endswith(f":{kind}") for t in kinds) == 1, kind
    out = mocks.outputs(component)
    assert (out["namespace"], out["agent_namespace"]) == ("ha-ops", "ha-ops-agent")
    assert (out["agent_daemonset"], out["controller_deployment"]) == ("ha-ops-agent", "ha-ops-controller")
    assert out["priority_classes"] == ["critical", "normal", "preemptible-training"]
    assert out["images"] == {"agent": AGENT_IMAGE, "controller": CONTROLLER_IMAGE}
    assert "default-deny" in out["network_policies"]
    assert out["controller_url"] == "https://ha-ops-controller.ha-ops.svc:8800/v1/reports"  # mutual TLS by default


def test_priority_classes_order_the_agent_above_jobs_and_training_below(mocks: Harness) -> None:
    build(mocks)
    critical, normal, training = (
        obj(mocks, "PriorityClass", n) for n in ["critical", "normal", "preemptible-training"]
    )
    assert critical["value"] > normal["value"] > training["value"]
    assert training["preemptionPolicy"] == "Never"
    assert critical["value"] < 1_000_000_000  # below Kubernetes' own system classes


def test_the_agent_runs_on_every_gpu_node_only(mocks: Harness) -> None:
    spec = example("production.yaml")
    build(mocks, spec)
    ds = obj(mocks, "DaemonSet", "ha-ops-agent")
    pod = ds["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert any(t["key"] == "node.kubernetes.io/unschedulable" for t in pod["tolerations"])
    # The agent keeps reporting from a node ha-ops took out (NoSchedule, or NoExecute when lost) or holds as a spare.
    assert {"key": "ha-ops.io/gpu-unhealthy", "operator": "Exists"} in pod["tolerations"]
    assert {"key": "ha-ops.io/spare", "operator": "Exists"} in pod["tolerations"]
    assert pod["priorityClassName"] == "critical"
    assert pod["automountServiceAccountToken"] is True  # for its own node's condition, and nothing else (below)
    (container,) = pod["containers"]
    assert container["image"] == AGENT_IMAGE
    assert container["args"][-2:] == ["--node", "$(NODE_NAME)"]
    assert container["ports"][0]["containerPort"] == spec.monitoring.agent_port
    assert "nvidia.com/gpu" not in container.get("resources", {}).get("limits", {})  # never takes a job's GPU
    assert selects(ds["spec"]["selector"], ds["spec"]["template"]["metadata"]["labels"])

    # Its config is the agent's own model: metrics on the scraped port, reports to the controller's Service.
    config = AgentConfig.model_validate(yaml.safe_load(obj(mocks, "ConfigMap", "ha-ops-agent")["data"]["agent.yaml"]))
    assert config.metrics.port == spec.monitoring.agent_port
    assert config.slurm.enabled is False
    assert config.controller.urls == ["https://ha-ops-controller.ha-ops.svc:8800/v1/reports"]
    assert config.kubernetes.enabled is True
    # Mutual TLS: enrolled with its pod's token (its own audience) for its node, renewed through the controllers.
    assert config.controller.renew and config.controller.enroll is not None and config.controller.tls is not None
    assert config.controller.enroll.urls == ["https://ha-ops-controller.ha-ops.svc:8801"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    [token] = volumes["enroll-token"]["projected"]["sources"]
    assert token["serviceAccountToken"]["audience"] == "ha-ops-controller"
    assert volumes["ca"]["configMap"] == {"name": "ha-ops-ca"}  # the CA only: no key reaches a GPU node
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in container["volumeMounts"]}
    assert mounts[str(config.controller.enroll.token_file.parent)] is True
    assert mounts[str(config.controller.tls.cert_file.parent)] is False  # its own certificate, in memory


def test_the_agent_may_write_only_its_own_nodes_gpu_condition(mocks: Harness) -> None:
    build(mocks)
    role = obj(mocks, "ClusterRole", "ha-ops-agent-node-status")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                             {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]}]  # fmt: skip
    policy = obj(mocks, "ValidatingAdmissionPolicy", "ha-ops-agent-own-node")["spec"]
    assert policy["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:ha-ops-agent:ha-ops-agent'")  # fmt: skip
    assert "authentication.kubernetes.io/node-name" in policy["validations"][0]["expression"]
    binding = obj(mocks, "ValidatingAdmissionPolicyBinding", "ha-ops-agent-own-node")["spec"]
    assert binding == {"policyName": "ha-ops-agent-own-node", "validationActions": ["Deny"]}


@pytest.mark.parametrize(("spec_name", "topology"), [
    ("production.yaml", "topology.kubernetes.io/zone"),  # two zones: one replica in each
    ("lab.yaml", "kubernetes.io/hostname"),  # one zone: a zone rule would leave a replica pending forever
])  # fmt: skip
def test_the_controller_runs_two_replicas_kept_apart(mocks: Harness, spec_name: str, topology: str) -> None:
    build(mocks, example(spec_name))
    deploy = obj(mocks, "Deployment", "ha-ops-controller")
    spec = deploy["spec"]
    assert spec["replicas"] == 2
    labels = spec["template"]["metadata"]["labels"]
    (rule,) = spec["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert rule["topologyKey"] == topology
    assert selects(rule["labelSelector"], labels)
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert spec["template"]["spec"]["containers"][0]["image"] == CONTROLLER_IMAGE

    pdb = obj(mocks, "PodDisruptionBudget", "ha-ops-controller")
    assert pdb["spec"]["minAvailable"] == 1
    assert selects(pdb["spec"]["selector"], labels)
    service = obj(mocks, "Service", "ha-ops-controller")
    # The leader only: the pod it labels while it leads (LeaderLabel); a standby is not selected.
    assert not selects({"matchLabels": service["spec"]["selector"]}, labels)
    assert selects({"matchLabels": service["spec"]["selector"]}, {**labels, "ha-ops.io/leader": "true"})


def test_the_controller_may_touch_nodes_and_evict_pods_cluster_wide_but_not_delete_nodes(mocks: Harness) -> None:
    build(mocks)
    role = obj(mocks, "ClusterRole", "ha-ops-controller-nodes")
    verbs = {(group, resource): set(rule["verbs"]) for rule in role["rules"] for group in rule["apiGroups"]
             for resource in rule["resources"]}  # fmt: skip
    assert verbs[("", "nodes")] == {"get", "list", "watch", "patch"}  # no delete, no create
    assert verbs[("", "nodes/status")] == {"patch"} and verbs[("", "pods/eviction")] == {"create"}
    assert verbs[("authentication.k8s.io", "tokenreviews")] == {"create"}  # an agent pod's enrollment
    binding = obj(mocks, "ClusterRoleBinding", "ha-ops-controller-nodes")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ha-ops-controller", "namespace": "ha-ops"}]


def test_each_controller_replica_is_named_by_its_pod_and_writes_nothing_to_disk(mocks: Harness) -> None:
    build(mocks)
    pod = obj(mocks, "Deployment", "ha-ops-controller")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {"name": "HA_OPS_CONTROLLER_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container[
        "env"]  # fmt: skip
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {v["name"]: (v["mountPath"], v.get("readOnly")) for v in container["volumeMounts"]}
    # The lease and the state are in the API; the config, the audit key and the issuer are mounted read-only, and
    # only the certificate the controller issues itself is written, in memory.
    assert mounts == {"config": ("/etc/ha-ops", True), "audit-key": ("/run/secrets/ha-ops-audit", True),
                      "issuer": ("/run/secrets/ha-ops-issuer", True), "tls": ("/run/ha-ops/tls", None)}  # fmt: skip
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["audit-key"]["secret"] == {"secretName": "ha-ops-controller-audit-key", "defaultMode": 0o440}
    assert volumes["issuer"]["secret"] == {"secretName": "ha-ops-issuer", "defaultMode": 0o440}
    assert volumes["tls"]["emptyDir"]["medium"] == "Memory"
    assert {"name": "HA_OPS_CONTROLLER_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container[
        "env"]  # fmt: skip
    # Ready when the enrollment port answers (a kubelet's probe presents no client certificate).
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 8801, "scheme": "HTTPS"}
    # Alive whether it leads or not (/healthz is 200 for both), restarted only after a minute without an answer.
    assert container["livenessProbe"]["httpGet"] == container["readinessProbe"]["httpGet"]
    assert container["livenessProbe"]["periodSeconds"] * container["livenessProbe"]["failureThreshold"] >= 60
    # What Pod Security `restricted` asks of a pod (issue 44, finding 11).
    assert pod["securityContext"] == {"runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": True,
                                      "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}  # fmt: skip
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                            "capabilities": {"drop": ["ALL"]}}  # fmt: skip


def test_the_audit_key_comes_from_its_secret_or_the_chain_is_unkeyed_when_none_is_named() -> None:
    from ha_ops.iac.k8s_manifests import K8sLayerConfig, controller_config, controller_pod_spec
    from ha_ops.remediation.config import ControllerConfig

    spec = example("lab.yaml")
    keyed = ControllerConfig.model_validate(controller_config(spec, K8sLayerConfig(), "gpu", ["gpu1"]))
    assert str(keyed.audit_key_file) == "/run/secrets/ha-ops-audit/key"
    plain = K8sLayerConfig(audit_key_secret=None, issuer_secret=None, insecure=True)
    unkeyed = ControllerConfig.model_validate(controller_config(spec, plain, "gpu", ["gpu1"]))
    assert unkeyed.audit_key_file is None and unkeyed.tls is None and unkeyed.certificates is None
    pod = controller_pod_spec(spec, plain, "image")
    assert [v["name"] for v in pod["volumes"]] == ["config"]
    assert pod["containers"][0]["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": 8800}


def test_the_rendered_controller_config_drives_kubernetes_with_a_lease_and_its_state_in_the_api() -> None:
    from ha_ops.iac.k8s_manifests import K8sLayerConfig, controller_config
    from ha_ops.remediation.config import ControllerConfig

    spec = example("lab.yaml")
    config = ControllerConfig.model_validate(controller_config(spec, K8sLayerConfig(), "gpu", ["gpu1", "gpu2"]))
    assert config.scheduler == "kubernetes" and config.partition == "gpu"
    assert config.kubernetes is not None and config.kubernetes.lease is not None
    assert (config.kubernetes.lease.namespace, config.kubernetes.lease.name) == ("ha-ops", "ha-ops-controller")
    assert config.kubernetes.state is not None
    assert (config.kubernetes.state.namespace, config.kubernetes.state.prefix) == ("ha-ops", "ha-ops-controller")
    assert config.state_dir is None  # nothing on a volume: the root file system is read-only


def test_in_its_namespace_the_controller_may_only_use_leases_and_configmaps_and_delete_neither(mocks: Harness) -> None:
    build(mocks)
    role = obj(mocks, "Role", "ha-ops-controller-state")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},  # (the leader label only: below)
    ]
    policy = obj(mocks, "ValidatingAdmissionPolicy", "ha-ops-controller-own-pods")["spec"]
    assert policy["matchConditions"][0]["expression"] == (
        "request.userInfo.username == 'system:serviceaccount:ha-ops:ha-ops-controller'"
    )
    assert [v["message"] for v in policy["validations"]] == [
        "the ha-ops controller may label controller pods only",
        "the ha-ops controller may not change a pod's spec",
        "the ha-ops controller may change the label ha-ops.io/leader only",
        "the ha-ops controller may not change a pod's annotations",
    ]
    binding = obj(mocks, "ValidatingAdmissionPolicyBinding", "ha-ops-controller-own-pods")["spec"]
    assert binding == {"policyName": "ha-ops-controller-own-pods", "validationActions": ["Deny"]}
    binding = obj(mocks, "RoleBinding", "ha-ops-controller-state")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ha-ops-controller", "namespace": "ha-ops"}]
    deploy = obj(mocks, "Deployment", "ha-ops-controller")
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == "ha-ops-controller"


def _policy_objects(mocks: Harness) -> dict[str, dict[str, Any]]:
    found: list[Registered] = mocks.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    return {r.inputs["metadata"]["name"]: r.inputs for r in found}


def _policies(mocks: Harness) -> dict[str, dict[str, Any]]:
    return {name: inputs["spec"] for name, inputs in _policy_objects(mocks).items()}


def _policy_namespaces(mocks: Harness) -> dict[str, str]:
    return {name: inputs["metadata"]["namespace"] for name, inputs in _policy_objects(mocks).items()}


def test_network_policies_deny_by_default_and_allow_only_what_is_needed(mocks: Harness) -> None:
    spec = example("production.yaml")
    build(mocks, spec, config=K8sLayerConfig(api_server_cidrs=["10.0.0.10/32"]))
    policies = _policies(mocks)
    agent = obj(mocks, "DaemonSet", "ha-ops-agent")["spec"]["template"]["metadata"]["labels"]
    controller = obj(mocks, "Deployment", "ha-ops-controller")["spec"]["template"]["metadata"]["labels"]

    for prefix in ("", "agents-"):  # in both namespaces
        assert policies[f"{prefix}default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
        dns = policies[f"{prefix}allow-dns"]["egress"][0]
        assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    assert {n: ns for n, ns in _policy_namespaces(mocks).items() if n.startswith("agents-")} == dict.fromkeys(
        ["agents-default-deny", "agents-allow-dns", "agents-to-controller", "agents-to-apiserver",
         "agents-prometheus-scrape"], "ha-ops-agent")  # fmt: skip
    assert {ns for n, ns in _policy_namespaces(mocks).items() if not n.startswith("agents-")} == {"ha-ops"}

    def allows(name: str, direction: str, pods: dict[str, str]) -> set[int]:
        policy = policies[name]
        assert selects(policy["podSelector"], pods), name
        assert policy["policyTypes"] == [direction.capitalize()]
        return {p["port"] for rule in policy[direction] for p in rule["ports"]}

    # The API (mutual TLS) and the enrollment port.
    assert allows("agents-to-controller", "egress", agent) == {8800, 8801}
    # Across the two namespaces: the controllers' pods in theirs, the agents' in theirs.
    [to_controllers] = policies["agents-to-controller"]["egress"][0]["to"]
    assert selects(to_controllers["podSelector"], controller)
    assert to_controllers["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ha-ops"}}
    assert allows("controller-from-agents", "ingress", controller) == {8800, 8801}
    [from_agents] = policies["controller-from-agents"]["ingress"][0]["from"]
    assert selects(from_agents["podSelector"], agent)
    assert from_agents["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "ha-ops-agent"}}
    assert allows("agents-prometheus-scrape", "ingress", agent) == {spec.monitoring.agent_port}
    assert allows("prometheus-scrape", "ingress", controller) == {8800, 8801}
    for name in ("prometheus-scrape", "agents-prometheus-scrape"):
        scraper = policies[name]["ingress"][0]["from"][0]
        assert scraper["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    for name, pods in (("controller-to-apiserver", controller), ("agents-to-apiserver", agent)):
        assert allows(name, "egress", pods) == {443, 6443}
        assert policies[name]["egress"][0]["to"] == [{"ipBlock": {"cidr": "10.0.0.10/32"}}]
    assert allows("controller-to-monitoring", "egress", controller) == {9090, 9093}
    # The agent may reach nothing but the controller, the API server (its node's condition) and DNS.
    agent_egress = [n for n, p in policies.items() if "egress" in p and selects(p["podSelector"], agent)
                    and _policy_namespaces(mocks)[n] == "ha-ops-agent"]  # fmt: skip
    assert sorted(agent_egress) == ["agents-allow-dns", "agents-to-apiserver", "agents-to-controller"]


def test_the_alert_rules_and_scraping_are_the_prometheus_operators_by_default(mocks: Harness) -> None:
    build(mocks)
    rule = obj(mocks, "PrometheusRule", "ha-ops-alert-rules")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(rules_yaml())["groups"]  # the rules ha-ops renders, as they are
    monitor = obj(mocks, "PodMonitor", "ha-ops")["spec"]
    for app in ("ha-ops-agent", "ha-ops-controller"):
        assert selects(monitor["selector"], {"app.kubernetes.io/name": app})
    agents, controllers = monitor["podMetricsEndpoints"]
    assert agents == {"port": "metrics", "path": "/metrics"}
    # The controllers' metrics over TLS on the port that asks for no client certificate, verified with the CA.
    assert controllers == {
        "port": "enroll",
        "path": "/metrics",
        "scheme": "https",
        "tlsConfig": {
            "ca": {"configMap": {"name": "ha-ops-ca", "key": "ca.crt"}},
            "serverName": "ha-ops-controller.ha-ops.svc",
        },
    }
    # ...and the ports it names are the pods' own.
    workloads = (("DaemonSet", "ha-ops-agent"), ("Deployment", "ha-ops-controller"))
    pods = [obj(mocks, kind, name)["spec"]["template"]["spec"] for kind, name in workloads]
    assert {p["name"] for pod in pods for p in pod["containers"][0]["ports"]} == {"metrics", "http", "enroll"}


def test_without_the_operator_the_alert_rules_are_a_rule_file_in_a_config_map(mocks: Harness) -> None:
    build(mocks, config=K8sLayerConfig(prometheus_operator=False))
    data = obj(mocks, "ConfigMap", "ha-ops-alert-rules")["data"]
    assert data == {"ha-ops-rules.yml": rules_yaml()}
    assert {g["name"] for g in yaml.safe_load(data["ha-ops-rules.yml"])["groups"]} == {"ha-ops-lab", "ha-ops-cluster"}
    assert not [r for r in mocks.resources if r.type.endswith((":PrometheusRule", ":PodMonitor"))]


def test_an_image_by_tag_is_refused_before_anything_is_created(mocks: Harness) -> None:
    tagged = Images(agent="registry.example/ha-ops/agent:1.0", controller=CONTROLLER_IMAGE)
    with pytest.raises(PolicyViolationError) as info:
        build(mocks, images=tagged)
    assert [(v.rule, v.field) for v in info.value.violations] == [
        ("HA-IMAGE-DIGEST", "ClusterK8sLayerArgs.images.agent")
    ]
    assert mocks.resources == []


def test_images_come_from_the_spec_when_not_given_and_are_checked_there(mocks: Harness) -> None:
    spec = changed(
        "production.yaml",
        lambda d: d.update(images={"agent": AGENT_IMAGE, "controller": "registry.example/ha-ops/controller:2"}),
    )
    with pytest.raises(PolicyViolationError) as info:
        build(mocks, spec, images=None)
    assert [(v.rule, v.field) for v in info.value.violations] == [("HA-IMAGE-DIGEST", "images.controller")]
    assert mocks.resources == []

    pinned = changed(
        "production.yaml", lambda d: d.update(images={"agent": AGENT_IMAGE, "controller": CONTROLLER_IMAGE})
    )
    build(mocks, pinned, images=None)
    deploy = obj(mocks, "Deployment", "ha-ops-controller")
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == CONTROLLER_IMAGE


def test_no_images_at_all_or_a_bad_controller_config_create_nothing(mocks: Harness) -> None:
    with pytest.raises(SpecError, match="images: no images given"):
        build(mocks, example("lab.yaml"), images=None)
    args = ClusterK8sLayerArgs(example("lab.yaml"), "state_dir: /x\nport: nope\n", images=IMAGES)
    with pytest.raises(SpecError) as info:
        mocks.run(lambda: ClusterK8sLayer("ha", args))
    assert any(p.startswith("controller_config_yaml.id:") for p in info.value.problems)
    assert any(p.startswith("controller_config_yaml.port:") for p in info.value.problems)
    assert mocks.resources == []


def test_the_controllers_run_where_the_layer_config_says(mocks: Harness) -> None:
    build(mocks, config=K8sLayerConfig(controller_node_selector={"node-role.example.com/system": "true"}))
    pod = obj(mocks, "Deployment", "ha-ops-controller")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"node-role.example.com/system": "true"}


def test_without_a_node_selector_the_controllers_may_run_on_any_node(mocks: Harness) -> None:
    build(mocks)
    assert "nodeSelector" not in obj(mocks, "Deployment", "ha-ops-controller")["spec"]["template"]["spec"]


def test_a_lab_without_gpus_gives_the_agent_fake_ones_and_its_own_tolerations(mocks: Harness) -> None:
    extra = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
    build(mocks, config=K8sLayerConfig(agent_fake_gpus_dir="/run/ha-ops-node/gpus", agent_tolerations=[extra]))
    pod = obj(mocks, "DaemonSet", "ha-ops-agent")["spec"]["template"]["spec"]
    assert extra in pod["tolerations"] and {"key": "nvidia.com/gpu", "operator": "Exists",
                                            "effect": "NoSchedule"} in pod["tolerations"]  # fmt: skip
    assert {"name": "fake-gpus", "hostPath": {"path": "/run/ha-ops-node/gpus", "type": "Directory"}} in pod["volumes"]
    assert {"name": "fake-gpus", "mountPath": "/run/ha-ops-node/gpus", "readOnly": True} in pod["containers"][0][
        "volumeMounts"]  # fmt: skip
    config = AgentConfig.model_validate(yaml.safe_load(obj(mocks, "ConfigMap", "ha-ops-agent")["data"]["agent.yaml"]))
    assert (config.backend, str(config.fake_dir)) == ("fake", "/run/ha-ops-node/gpus")
    build_default = K8sLayerConfig()
    assert build_default.agent_fake_gpus_dir == "" and build_default.agent_tolerations == []  # NVML by default


def test_the_controllers_ship_their_audit_entries_to_a_collector_with_their_own_certificates() -> None:
    from ha_ops.iac.k8s_manifests import K8sLayerConfig, controller_config, controller_pod_spec, network_policies
    from ha_ops.remediation.config import ControllerConfig

    spec = example("lab.yaml")
    cfg = K8sLayerConfig(audit_sink={"address": "10.0.0.53", "port": 6514})
    config = ControllerConfig.model_validate(controller_config(spec, cfg, "gpu", ["gpu1"]))
    assert config.audit_sink is not None and config.tls is not None
    assert (config.audit_sink.address, config.audit_sink.port) == ("10.0.0.53", 6514)
    assert config.audit_sink.tls == config.tls  # the certificate the controller issued itself, naming the Service
    pod = controller_pod_spec(spec, cfg, "image")
    mounts = {m["mountPath"]: m.get("readOnly", False) for m in pod["containers"][0]["volumeMounts"]}
    assert mounts[str(config.audit_sink.marker_file.parent)] is False  # in a volume: the root file system is read-only
    egress = network_policies(spec, cfg)["controller-to-audit-sink"]["egress"]
    assert egress == [{"to": [{"ipBlock": {"cidr": "10.0.0.53/32"}}], "ports": [{"port": 6514, "protocol": "TCP"}]}]
    with pytest.raises(ValueError, match="audit_sink: needs issuer_secret"):
        K8sLayerConfig(audit_sink={"address": "10.0.0.53"}, issuer_secret=None, insecure=True)
