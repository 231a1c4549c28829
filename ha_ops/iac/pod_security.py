"""Pod Security admission for the layer's namespaces: the labels, and the checks of a pod spec against a level.

Pure. The layer labels each namespace with the level its pods need and checks its own pods against it before
anything is applied, so that a change to a pod spec that would be refused by the API server (or, worse, a level
loosened to let it in) fails at render time, naming the field. The rules are the Pod Security Standards' (v1.32,
kubernetes.io/docs/concepts/security/pod-security-standards), for the fields the layer's pods use; the API server's
own admission is the final word (the lab applies the layer with `kubectl apply --dry-run=server` against them).
"""

from __future__ import annotations

from typing import Any

LEVELS = ("restricted", "baseline", "privileged")  # strictest first
LABEL = "pod-security.kubernetes.io"
# The volume types `restricted` admits (every other, hostPath above all, needs `privileged`; baseline admits all but
# hostPath).
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip
BASELINE_CAPABILITIES = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                         "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # fmt: skip


def looser(*levels: str) -> str:
    """The least strict of the levels: what a namespace shared by pods of these levels must admit."""
    return max(levels, key=LEVELS.index)


def namespace_labels(level: str) -> dict[str, str]:
    """Enforced, and warned and audited at the same level, at the API server's latest rules: a pod the layer renders
    is checked against them here, and a cluster upgrade that tightens them warns before it refuses."""
    if level not in LEVELS:
        raise ValueError(f"not a Pod Security level: {level!r} (one of {', '.join(LEVELS)})")
    labels = {}
    for mode in ("enforce", "warn", "audit"):
        labels[f"{LABEL}/{mode}"] = level
        labels[f"{LABEL}/{mode}-version"] = "latest"
    return labels


def _containers(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        out += [(f"{field}[{i}]", c) for i, c in enumerate(pod.get(field) or [])]
    return out


def baseline_problems(pod: dict[str, Any]) -> list[str]:
    """What Pod Security `baseline` refuses in a pod spec, each naming its field."""
    problems = [f"{f}: true" for f in ("hostNetwork", "hostPID", "hostIPC") if pod.get(f)]
    problems += [f"volumes[{i}].hostPath ({v['name']})" for i, v in enumerate(pod.get("volumes") or [])
                 if "hostPath" in v]  # fmt: skip
    for where, c in _containers(pod):
        context = c.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{where}.securityContext.privileged: true")
        added = set((context.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        problems += [f"{where}.securityContext.capabilities.add: {cap}" for cap in sorted(added)]
        problems += [f"{where}.ports[{i}].hostPort" for i, p in enumerate(c.get("ports") or []) if p.get("hostPort")]
    return problems


def restricted_problems(pod: dict[str, Any]) -> list[str]:
    """What Pod Security `restricted` refuses in a pod spec (baseline's refusals and its own), each naming its
    field. A container's setting, where it has one, overrides the pod's."""
    problems = baseline_problems(pod)
    problems += [f"volumes[{i}] ({v['name']}): type {next(k for k in v if k != 'name')} is not admitted"
                 for i, v in enumerate(pod.get("volumes") or [])
                 if "hostPath" not in v and not set(v) - {"name"} <= RESTRICTED_VOLUMES]  # fmt: skip
    pod_context = pod.get("securityContext") or {}
    for where, c in _containers(pod):
        context = c.get("securityContext") or {}

        def setting(key: str, c: dict[str, Any] = context) -> Any:
            return c[key] if key in c else pod_context.get(key)

        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}.securityContext.allowPrivilegeEscalation: must be false")
        if setting("runAsNonRoot") is not True:
            problems.append(f"{where}: runAsNonRoot must be true (the pod's or the container's securityContext)")
        if setting("runAsUser") == 0:
            problems.append(f"{where}: runAsUser 0")
        seccomp = (setting("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost (is {seccomp})")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{where}.securityContext.capabilities.drop: must include ALL")
        # (What baseline refuses is named above once; restricted refuses baseline's own but NET_BIND_SERVICE.)
        problems += [f"{where}.securityContext.capabilities.add: {cap} (restricted admits NET_BIND_SERVICE only)"
                     for cap in capabilities.get("add") or []
                     if cap in BASELINE_CAPABILITIES and cap != "NET_BIND_SERVICE"]  # fmt: skip
    return problems


def problems_at(level: str, pod: dict[str, Any]) -> list[str]:
    """What `level` refuses in the pod spec."""
    if level == "restricted":
        return restricted_problems(pod)
    return baseline_problems(pod) if level == "baseline" else []
