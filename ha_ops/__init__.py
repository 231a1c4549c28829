"""ha-ops: build and operate high-availability GPU clusters."""

import logging

__version__ = "0.1.0"

# The library never prints: the CLI decides what reaches the terminal.
logging.getLogger(__name__).addHandler(logging.NullHandler())


def discover(discover_system: bool = True) -> dict:
    """Chaos Toolkit's discovery hook (`chaos discover ha-ops`): the actions and probes of ha_ops.chaos."""
    from ha_ops.chaos import discover as chaos_discover

    return chaos_discover(discover_system)
