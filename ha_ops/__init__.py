"""ha-ops: build and operate high-availability GPU clusters."""

import logging

__version__ = "0.1.0"

# The library never prints: the CLI decides what reaches the terminal.
logging.getLogger(__name__).addHandler(logging.NullHandler())
