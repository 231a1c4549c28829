"""The controllers' shared documents: files, and ConfigMaps over an in-memory stand-in for the API's optimistic
concurrency (the same calls against a real API server: tests/integration/test_kubernetes.py)."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import ConfigMap

from ha_ops.remediation.audit import AuditLog, verify_text
from ha_ops.remediation.documents import DirectoryDocuments
from ha_ops.remediation.k8s_documents import FOLDER_LABEL, STATE_LABEL, ConfigMapDocuments, DocumentError


def api_error(code: int) -> ApiError:
    request = httpx2.Request("PUT", "https://api/api/v1/namespaces/ha-ops/configmaps/x")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "message": f"said {code}"}
    return ApiError(request=request, response=httpx2.Response(code, json=body, request=request))


class ApiServer:
    """ConfigMaps by name, each with a resourceVersion that every write bumps; a write carrying an older one, or a
    create of an existing name, is refused with 409, as the API server does."""

    def __init__(self) -> None:
        self.objects: dict[str, ConfigMap] = {}
        self.versions = itertools.count(1)
        self.calls: list[str] = []
        self.fail_next: list[int] = []  # status codes for the next writes

    def _fail(self) -> None:
        if self.fail_next:
            raise api_error(self.fail_next.pop(0))

    def get(self, kind: type, name: str, namespace: str) -> ConfigMap:
        self.calls.append(f"get {name}")
        if name not in self.objects:
            raise api_error(404)
        return copy.deepcopy(self.objects[name])

    def list(self, kind: type, namespace: str, labels: dict[str, str]) -> list[ConfigMap]:
        self.calls.append("list")
        return [copy.deepcopy(o) for o in self.objects.values() if labels.items() <= (o.metadata.labels or {}).items()]

    def create(self, body: ConfigMap) -> ConfigMap:
        self.calls.append(f"create {body.metadata.name}")
        self._fail()
        if body.metadata.name in self.objects:
            raise api_error(409)
        return self._store(body)

    def replace(self, body: ConfigMap) -> ConfigMap:
        self.calls.append(f"replace {body.metadata.name}")
        self._fail()
        current = self.objects.get(body.metadata.name)
        if current is None:
            raise api_error(404)
        if body.metadata.resourceVersion and body.metadata.resourceVersion != current.metadata.resourceVersion:
            raise api_error(409)
        return self._store(body)

    def _store(self, body: ConfigMap) -> ConfigMap:
        """Store the object with the next resourceVersion; the answer is the object stored, as the API's."""
        stored = copy.deepcopy(body)
        stored.metadata.resourceVersion = str(next(self.versions))
        self.objects[body.metadata.name] = stored
        return copy.deepcopy(stored)


@pytest.fixture
def api() -> ApiServer:
    return ApiServer()


def documents(api: ApiServer, segment_bytes: int = 512 * 1024) -> ConfigMapDocuments:
    return ConfigMapDocuments(api, "ha-ops", "hao", segment_bytes)  # type: ignore[arg-type]


def test_a_document_is_one_labelled_configmap_named_after_it(api: ApiServer) -> None:
    docs = documents(api)
    assert docs.read("state.json") is None
    docs.write("state.json", "{}")
    docs.write("views/ctl-a.json", '{"id": "ctl-a"}')
    docs.write("state.json", '{"v": 2}')
    assert docs.read("state.json") == '{"v": 2}'
    assert set(api.objects) == {"hao-state.json", "hao-views.ctl-a.json"}
    labels = api.objects["hao-views.ctl-a.json"].metadata.labels
    assert labels == {STATE_LABEL: "hao", FOLDER_LABEL: "views"}
    assert docs.folder("views") == {"ctl-a.json": '{"id": "ctl-a"}'}
    assert docs.describe("views/ctl-a.json") == "ConfigMap ha-ops/hao-views.ctl-a.json"


def test_a_version_changes_with_every_write_and_only_then(api: ApiServer) -> None:
    docs = documents(api)
    empty = docs.version("state.json")
    docs.write("state.json", "a")
    first = docs.version("state.json")
    assert first != empty and docs.version("state.json") == first
    docs.write("state.json", "a")
    assert docs.version("state.json") != first


def test_appends_fill_segments_in_order_and_read_back_as_one_log(api: ApiServer) -> None:
    docs = documents(api, segment_bytes=64)
    lines = [f"line {i:02d} " + "x" * 20 + "\n" for i in range(10)]  # 29 bytes: two to a segment
    for line in lines:
        docs.append("audit.jsonl", line)
    assert docs.read("audit.jsonl") == "".join(lines)
    segments = sorted(n for n in api.objects if n.startswith("hao-audit.jsonl."))
    assert segments == [f"hao-audit.jsonl.{i:06d}" for i in range(1, 6)]
    assert all(len(api.objects[s].data["text"].encode()) <= 64 for s in segments)
    assert docs.folder("") == {}  # segments are not documents of the root folder


def test_a_writer_that_knew_an_older_last_segment_appends_after_the_newest(api: ApiServer) -> None:
    """A controller that led before, then stood by while the other appended (and began new segments), leads again:
    its next line goes at the very end, never into a segment it last knew."""
    old, new = documents(api, segment_bytes=64), documents(api, segment_bytes=64)
    old.append("audit.jsonl", "a" * 40 + "\n")
    for i in range(4):
        new.append("audit.jsonl", f"{i}" * 40 + "\n")
    old.append("audit.jsonl", "z" * 40 + "\n")
    assert documents(api).read("audit.jsonl").splitlines()[-1] == "z" * 40
    assert old.version("audit.jsonl") == new.version("audit.jsonl")


def test_an_append_that_loses_a_race_reads_again_and_loses_no_line(api: ApiServer) -> None:
    docs = documents(api)
    docs.append("audit.jsonl", "1\n")
    api.fail_next = [409, 409]
    docs.append("audit.jsonl", "2\n")
    assert docs.read("audit.jsonl") == "1\n2\n"


def test_a_writer_reads_nothing_back_before_its_next_write_unless_someone_else_wrote(api: ApiServer) -> None:
    """The state (hundreds of KiB at 1,500 nodes) is written with the resourceVersion of this process' last write,
    without reading it first; another writer's change meanwhile gets a 409, a read, and the write lands."""
    docs, other = documents(api), documents(api)
    docs.write("state.json", "1")
    api.calls.clear()
    docs.write("state.json", "2")
    assert api.calls == ["replace hao-state.json"]
    other.write("state.json", "from the other")
    api.calls.clear()
    docs.write("state.json", "3")
    assert api.calls == ["replace hao-state.json", "get hao-state.json", "replace hao-state.json"]  # the 409, then
    assert docs.read("state.json") == "3"


def test_appends_read_only_whether_a_later_segment_began(api: ApiServer) -> None:
    """The last segment as this process wrote it is appended to without reading it again (a storm's appends each
    rewrite it); only the next segment's absence is asked, so a segment begun elsewhere is never missed."""
    docs = documents(api)
    docs.append("audit.jsonl", "1\n")
    api.calls.clear()
    docs.append("audit.jsonl", "2\n")
    assert api.calls == ["get hao-audit.jsonl.000002", "replace hao-audit.jsonl.000001"]
    documents(api).append("audit.jsonl", "3\n")  # another writer, into the same segment
    docs.append("audit.jsonl", "4\n")  # a 409, a read, the line at the end
    assert docs.read("audit.jsonl") == "1\n2\n3\n4\n"


def test_other_api_errors_are_named_os_errors(api: ApiServer) -> None:
    docs = documents(api)
    api.fail_next = [403]
    with pytest.raises(DocumentError, match=r"ha-ops/hao-state\.json: 403 said 403"):
        docs.write("state.json", "{}")
    assert isinstance(DocumentError("x"), OSError)  # so the controller treats it as a storage failure


@pytest.mark.parametrize("store", ["files", "configmaps"])
def test_the_audit_log_chains_across_two_controllers_sharing_the_documents(
    store: str, api: ApiServer, tmp_path: Path
) -> None:
    """The leader appends, a failover happens, the new leader appends: one intact chain, and each knows the intents
    the other audited (so an action re-run after a failover is not audited twice)."""

    def docs() -> Any:
        return DirectoryDocuments(tmp_path) if store == "files" else documents(api, segment_bytes=600)

    first, second = AuditLog(docs()), AuditLog(docs())
    for i in range(3):
        first.append(at=float(i), who="ctl-a/1", what="cordon", node=f"n{i}", why="xid 79", intent=f"i{i}")
    assert second.intents() == {"i0", "i1", "i2"} and second.head() == first.head()
    for i in range(3, 6):
        second.append(at=float(i), who="ctl-b/2", what="cordon", node=f"n{i}", why="xid 79", intent=f"i{i}")
    assert first.head().seq == 6 and "i5" in first.intents()
    text = docs().read("audit.jsonl") or ""
    assert verify_text(text, first.head()) == []
    assert [json.loads(line)["who"] for line in text.splitlines()] == ["ctl-a/1"] * 3 + ["ctl-b/2"] * 3
