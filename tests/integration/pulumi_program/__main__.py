"""Files managed by a Python dynamic provider: created with their content's digest as an output, changed in place when
the content changes, removed by destroy."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, Resource, ResourceProvider, UpdateResult


class FileProvider(ResourceProvider):
    def _write(self, props: dict[str, Any]) -> dict[str, Any]:
        path = Path(props["path"])
        path.write_text(props["content"])
        return {**props, "sha256": hashlib.sha256(props["content"].encode()).hexdigest()}

    def create(self, props: dict[str, Any]) -> CreateResult:
        return CreateResult(id_=props["path"], outs=self._write(props))

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in ("path", "content") if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=["path"] if "path" in changed else [])

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        return UpdateResult(outs=self._write(news))

    def delete(self, _id: str, props: dict[str, Any]) -> None:
        Path(props["path"]).unlink(missing_ok=True)


class ManagedFile(Resource):
    sha256: pulumi.Output[str]

    def __init__(self, name: str, path: str, content: str, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(FileProvider(), name, {"path": path, "content": content, "sha256": None}, opts)


config = pulumi.Config()
folder = Path(config.require("folder"))
files = [ManagedFile(f"file-{i}", str(folder / f"node-{i}.txt"), f"node {i} {config.get('generation') or 'one'}\n")
         for i in range(config.get_int("count") or 2)]  # fmt: skip
pulumi.export("digests", [f.sha256 for f in files])
pulumi.export("token", config.require_secret("token"))
