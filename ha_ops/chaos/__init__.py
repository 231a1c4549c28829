"""ha-ops as a Chaos Toolkit extension: fault actions and probes against a cluster (ha_ops.chaos.actions,
ha_ops.chaos.probes), the fault journal that guarantees rollbacks, and the runner behind `ha-ops chaos run`."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def discover(discover_system: bool = True) -> dict[str, Any]:
    """Chaos Toolkit's discovery entry point: every action and probe this extension offers."""
    from chaoslib.discovery.discover import discover_actions, discover_probes, initialize_discovery_result

    result = initialize_discovery_result("ha-ops", __version__, "ha-ops")
    result["activities"].extend(discover_actions("ha_ops.chaos.actions"))
    result["activities"].extend(discover_probes("ha_ops.chaos.probes"))
    return result
