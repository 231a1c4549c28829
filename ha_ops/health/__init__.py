"""GPU health: checks (pure), verdicts, the agent loop, its metrics and its reporters."""
