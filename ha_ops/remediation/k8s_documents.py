"""The controllers' shared documents as ConfigMaps in their namespace (documents.py's protocol), so that the
controller Deployment needs no shared volume and no writable root filesystem, and a failover finds the state,
the audit chain and the peers' views where the old leader left them.

- A document is one ConfigMap, `<prefix>-<name>` (`/` becomes `.`), its text under the key `text`. Every one is
  labelled `ha-ops.io/state=<prefix>` and `ha-ops.io/folder=<folder>`, so a folder is one labelled list.
- An appended document (the audit log) is a chain of segments, `<prefix>-<name>.000001`, ..., each under
  `segment_bytes` (a ConfigMap holds at most 1 MiB). A writer or reader lists the segments once, then finds the last
  one by asking for the next after the last it knew until there is none.
- Appends carry the resourceVersion read: two writers never lose a line (409, read again, retry). The controller
  writes only under its lease anyway; this keeps a deposed leader's late write from overwriting the new one's.
- What this process wrote last is kept (the API's answer to the write), and the next write or append goes out with
  its resourceVersion without reading it again: the state (hundreds of KiB at 1,500 nodes) and the log's last segment
  cost one request per write, not a read and a write. A 409 means someone else wrote: read again, as before.
"""

from __future__ import annotations

from collections.abc import Hashable

import httpx2
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

STATE_LABEL = "ha-ops.io/state"
FOLDER_LABEL = "ha-ops.io/folder"
DOCUMENT_ANNOTATION = "ha-ops.io/document"
KEY = "text"
# Each append rewrites the last segment whole: small segments keep a storm's appends cheap (the API server's
# limit is 1 MiB an object).
SEGMENT_BYTES = 128 * 1024
ROOT_FOLDER = "root"


class DocumentError(OSError):
    """The API refused or could not be reached (an OSError, as a file store's failures are)."""


class ConfigMapDocuments:
    def __init__(self, client: Client, namespace: str, prefix: str, segment_bytes: int = SEGMENT_BYTES) -> None:
        self.client = client
        self.namespace = namespace
        self.prefix = prefix
        self.segment_bytes = segment_bytes
        self._last: dict[str, int] = {}  # appended document -> its last segment, as last seen
        self._mine: dict[str, ConfigMap] = {}  # object name -> the object as this process last wrote it

    # --- names --------------------------------------------------------------------------------------------------
    def object_name(self, name: str, segment: int | None = None) -> str:
        base = f"{self.prefix}-{name.replace('/', '.').replace('_', '-').lower()}"
        return base if segment is None else f"{base}.{segment:06d}"

    def describe(self, name: str) -> str:
        return f"ConfigMap {self.namespace}/{self.object_name(name)}"

    @staticmethod
    def folder_of(name: str) -> str:
        return name.rpartition("/")[0].replace("/", ".") or ROOT_FOLDER

    def _labels(self, name: str) -> dict[str, str]:
        return {STATE_LABEL: self.prefix, FOLDER_LABEL: self.folder_of(name)}

    # --- API calls ----------------------------------------------------------------------------------------------
    def _get(self, object_name: str) -> ConfigMap | None:
        try:
            return self.client.get(ConfigMap, object_name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise self._error(object_name, exc) from None
        except httpx2.HTTPError as exc:
            raise self._error(object_name, exc) from None

    def _list(self, labels: dict[str, str]) -> list[ConfigMap]:
        try:
            return list(self.client.list(ConfigMap, namespace=self.namespace, labels=labels))
        except (ApiError, httpx2.HTTPError) as exc:
            raise self._error(",".join(f"{k}={v}" for k, v in labels.items()), exc) from None

    def _put(self, name: str, object_name: str, text: str, found: ConfigMap | None, **annotations: str) -> None:
        """Create the ConfigMap, or replace `found` (with its resourceVersion: ApiError 409 if it changed since)."""
        meta = ObjectMeta(name=object_name, namespace=self.namespace, labels=self._labels(name),
                          annotations={DOCUMENT_ANNOTATION: name, **annotations})  # fmt: skip
        if found is not None and found.metadata is not None:
            meta.resourceVersion = found.metadata.resourceVersion
        body = ConfigMap(metadata=meta, data={KEY: text})
        self._mine.pop(object_name, None)  # (until the answer: a write that fails leaves nothing to trust)
        self._mine[object_name] = self.client.create(body) if found is None else self.client.replace(body)

    def _error(self, what: str, exc: Exception) -> DocumentError:
        said = f"{exc.status.code} {exc.status.message}" if isinstance(exc, ApiError) else str(exc)
        return DocumentError(f"{self.namespace}/{what}: {said}")

    @staticmethod
    def _text(found: ConfigMap | None) -> str | None:
        return None if found is None else (found.data or {}).get(KEY, "")

    # --- whole documents ----------------------------------------------------------------------------------------
    def read(self, name: str) -> str | None:
        single = self._get(self.object_name(name))
        if single is not None:
            return self._text(single)
        segments = self._segments(name)
        return "".join(self._text(s) or "" for s in segments) if segments else None

    def write(self, name: str, text: str) -> None:
        object_name = self.object_name(name)
        for _ in range(5):
            known = self._mine.get(object_name)  # (first as last written here; after a 409, read)
            try:
                self._put(name, object_name, text, known if known is not None else self._get(object_name))
                return
            except ApiError as exc:
                if exc.status.code not in (409,):  # 409: created or changed between the read and the write
                    raise self._error(object_name, exc) from None
                self._mine.pop(object_name, None)
            except httpx2.HTTPError as exc:
                raise self._error(object_name, exc) from None
        raise DocumentError(f"{self.namespace}/{object_name}: still conflicting after 5 writes")

    def version(self, name: str) -> Hashable:
        single = self._get(self.object_name(name))
        if single is not None:
            return ("single", single.metadata.resourceVersion if single.metadata else "")
        last, found = self._follow(name)
        return (last, found.metadata.resourceVersion if found is not None and found.metadata else "")

    def folder(self, folder: str) -> dict[str, str]:
        found = {}
        for item in self._list({STATE_LABEL: self.prefix, FOLDER_LABEL: folder.replace("/", ".") or ROOT_FOLDER}):
            name = ((item.metadata.annotations or {}) if item.metadata else {}).get(DOCUMENT_ANNOTATION, "")
            if name and not item.metadata.name.rpartition(".")[2].isdigit():  # type: ignore[union-attr]
                found[name.rpartition("/")[2]] = self._text(item) or ""
        return found

    # --- appended documents (segments) --------------------------------------------------------------------------
    def _segments(self, name: str) -> list[ConfigMap]:
        """Every segment of an appended document, in order."""
        base = self.object_name(name) + "."
        items = [i for i in self._list(self._labels(name)) if i.metadata and (i.metadata.name or "").startswith(base)]
        items.sort(key=lambda i: int(i.metadata.name.rpartition(".")[2]))  # type: ignore[union-attr]
        if items:
            self._last[name] = int(items[-1].metadata.name.rpartition(".")[2])  # type: ignore[union-attr]
        return items

    def _follow(self, name: str) -> tuple[int, ConfigMap | None]:
        """The last segment (number and object), found from the one last seen by asking for the next until there is
        none (another controller may have appended since); (0, None) if the document has none."""
        if name not in self._last and not self._segments(name):
            return 0, None
        number = self._last[name]
        found = self._get(self.object_name(name, number))
        if found is None:  # the segment known was removed (by hand): list again
            segments = self._segments(name)
            return (self._last[name], segments[-1]) if segments else (0, None)
        while (following := self._get(self.object_name(name, number + 1))) is not None:
            number, found = number + 1, following
        self._last[name] = number
        return number, found

    def _last_segment(self, name: str) -> tuple[int, ConfigMap | None]:
        """_follow, but the segment as this process last wrote it when it has, and no later one exists (a 409 on the
        write says it changed meanwhile)."""
        number = self._last.get(name)
        mine = self._mine.get(self.object_name(name, number)) if number is not None else None
        if number is None or mine is None or self._get(self.object_name(name, number + 1)) is not None:
            return self._follow(name)
        return number, mine

    def append(self, name: str, line: str) -> None:
        for _ in range(10):
            number, last = self._last_segment(name)
            text = self._text(last) or ""
            try:
                if last is not None and len(text.encode()) + len(line.encode()) <= self.segment_bytes:
                    self._put(name, self.object_name(name, number), text + line, last)
                else:  # the first segment, or the last one is full
                    self._put(name, self.object_name(name, number + 1), line, None)
                    self._last[name] = number + 1
                return
            except ApiError as exc:
                if exc.status.code != 409:  # 409: another writer appended or began a segment first: read again
                    raise self._error(self.object_name(name, number), exc) from None
                self._mine.pop(self.object_name(name, number), None)
            except httpx2.HTTPError as exc:
                raise self._error(self.object_name(name, number), exc) from None
        raise DocumentError(f"{self.namespace}/{self.object_name(name)}: still conflicting after 10 appends")
