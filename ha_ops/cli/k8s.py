"""`ha-ops k8s render`: the ha-ops layer for a Kubernetes cluster as a Kustomize base, the same objects the Pulumi
stack infra/k8s applies (ha_ops.iac.k8s_manifests.layer_objects), for `kubectl apply -k` or a GitOps tool."""

from __future__ import annotations

from pathlib import Path

import typer

from ha_ops.cli import output

app = typer.Typer(help="The ha-ops layer on a Kubernetes cluster.", no_args_is_help=True)

LAYER_HELP = ("YAML of how the layer fits the cluster (K8sLayerConfig: namespace, controller_node_selector, "
              "prometheus_operator, ...). Default: the defaults.")  # fmt: skip


@app.command()
def render(
    spec_file: Path = typer.Argument(..., help="The cluster spec (YAML); its `images` must be pinned by digest."),
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write the Kustomize base to."),
    layer: Path | None = typer.Option(None, "--layer", help=LAYER_HELP),
    controller_config: Path | None = typer.Option(
        None, "--controller-config", help="The controller's config (YAML) instead of the one made from the spec."
    ),
    json_out: bool = typer.Option(False, "--json", help="The files and objects written, as JSON."),
) -> None:
    """Write the agent DaemonSet, the controller Deployment, their RBAC and admission policy, network policies and
    the alert rules and scraping (PrometheusRule and PodMonitor) as a Kustomize base; apply it with
    `kubectl apply -k OUT`. A folder that is not an earlier render is never overwritten (exit 2)."""
    from ha_ops.errors import SpecError
    from ha_ops.iac.k8s_manifests import K8sLayerConfig, default_controller_config, kustomize_base, layer_objects
    from ha_ops.iac.render import write_base
    from ha_ops.spec import load_spec
    from ha_ops.util.yamlconfig import load_model

    spec = load_spec(spec_file)
    cfg = load_model(layer, K8sLayerConfig) if layer else K8sLayerConfig()
    if controller_config is not None:
        try:
            config_text = controller_config.read_text()
        except OSError as exc:
            raise SpecError(str(controller_config), [f"cannot read: {exc.strerror}"]) from None
    else:
        config_text = default_controller_config(spec, cfg)
    objects = layer_objects(spec, cfg, config_text, source=str(spec_file))
    files = kustomize_base(objects)
    write_base(out, files)
    if json_out:
        made = [{"kind": o.kind, "name": o.name, "namespace": o.manifest["metadata"].get("namespace")} for o in objects]
        output.emit_json({"out": str(out), "files": sorted(files), "objects": made})
    else:
        output.result(f"{out}: {len(objects)} objects in a Kustomize base; apply with: kubectl apply -k {out}")
