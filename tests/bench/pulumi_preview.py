"""Benchmark: `pulumi preview` of the Kubernetes layer (infra/k8s) for examples/production.yaml with the locally
built CLI and provider, rendering manifests (no cluster needed): cold (first run of a new stack) and warm, and the
number of resources. The AWS stack is not previewed: its provider plugin is not built here and AWS is unreachable
(tests/unit/test_iac_aws_stack.py covers it with mocks). Prints figures only.

Run: .venv/bin/python tests/bench/pulumi_preview.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ha_ops.iac.engine import PulumiEngine

REPO = Path(__file__).resolve().parents[2]
IMAGES = {"agent": f"registry.invalid/ha-ops/agent@sha256:{'1' * 64}",
          "controller": f"registry.invalid/ha-ops/controller@sha256:{'2' * 64}"}  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        spec = yaml.safe_load((REPO / "examples" / "production.yaml").read_text())
        spec.setdefault("images", IMAGES)
        spec_file = Path(tmp) / "production.yaml"
        spec_file.write_text(yaml.safe_dump(spec))
        engine = PulumiEngine(Path(tmp) / "state")
        program = REPO / "infra" / "k8s"
        engine.select_stack(program, "production")
        engine.set_config(program, "production", {"spec": str(spec_file), "render_dir": str(Path(tmp) / "out")})
        for run in ("cold", "warm", "warm"):
            started = time.monotonic()
            preview = engine.preview(program, "production")
            elapsed = time.monotonic() - started
            steps = preview.get("steps", [])
            print(f"pulumi preview ({run}): {elapsed:.2f} s, {len(steps)} resources, {preview.get('changeSummary')}")


if __name__ == "__main__":
    main()
