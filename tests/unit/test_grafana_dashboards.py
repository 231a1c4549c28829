"""The Grafana dashboards (monitoring/grafana/dashboards/*.json) and their provisioning files: each dashboard passes
a schema check of the dashboard JSON Grafana provisions, its panels are well formed, and every metric its queries
name is one the ha-ops exporters really expose. For that the agent's, the remediation controller's and the storage
exporter's collectors are run here, as a scrape runs them, and their exposition text parsed: a dashboard that names
a metric nobody exports (a typo, a renamed metric) fails. Where promtool is installed it parses every query as
PromQL too."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from ha_ops.gpu.fake import healthy_state
from ha_ops.gpu.types import READING_FIELDS, GpuEvent, GpuSample
from ha_ops.health.checks import EventLedger, evaluate
from ha_ops.health.exporter import AgentCollector
from ha_ops.health.thresholds import Thresholds
from ha_ops.storage.exporter import StorageCollector
from ha_ops.storage.moosefs import StorageHealth
from tests.unit.test_remediation_controller import Rig, report

REPO = Path(__file__).resolve().parents[2]
GRAFANA = REPO / "monitoring" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}

PANEL_TYPES = {
    "row", "text", "stat", "gauge", "bargauge", "timeseries", "table", "state-timeline", "status-history",
    "heatmap", "piechart", "barchart", "histogram", "logs", "alertlist", "dashlist", "news", "nodeGraph",
}  # fmt: skip
# Series Prometheus makes itself, not an exporter: every target's scrape health, and the alerts its rules raise.
PROMETHEUS_SERIES = {"up", "ALERTS"}

# PromQL words that are not metric names (functions are recognised by their parenthesis).
KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "atan2", "inf", "nan", "start", "end",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+|\[\[\w+\]\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*\w+\s*\)\s*$", re.S)

# The JSON Grafana provisions: the fields every dashboard, panel and query here needs.
_TARGET = {
    "type": "object",
    "required": ["refId", "expr", "datasource"],
    "properties": {
        "refId": {"type": "string", "pattern": "^[A-Z]$"},
        "expr": {"type": "string", "minLength": 1},
        "legendFormat": {"type": "string"},
        "instant": {"type": "boolean"},
        "range": {"type": "boolean"},
        "format": {"enum": ["time_series", "table", "heatmap"]},
        "datasource": {"const": DATASOURCE},
    },
}
_GRID_POS = {
    "type": "object",
    "required": ["h", "w", "x", "y"],
    "properties": {
        "h": {"type": "integer", "minimum": 1},
        "w": {"type": "integer", "minimum": 1, "maximum": 24},
        "x": {"type": "integer", "minimum": 0, "maximum": 23},
        "y": {"type": "integer", "minimum": 0},
    },
}
_PANEL = {
    "type": "object",
    "required": ["id", "type", "title", "gridPos"],
    "properties": {
        "id": {"type": "integer", "minimum": 1},
        "type": {"enum": sorted(PANEL_TYPES)},
        "title": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "gridPos": _GRID_POS,
        "datasource": {"const": DATASOURCE},
        "targets": {"type": "array", "items": _TARGET},
        "fieldConfig": {"type": "object", "required": ["defaults", "overrides"]},
        "options": {"type": "object"},
        "transformations": {"type": "array", "items": {"type": "object", "required": ["id"]}},
        "panels": {"type": "array"},
    },
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["uid", "title", "panels", "schemaVersion", "templating", "time", "tags", "annotations"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "id": {"type": "null"},  # provisioned: Grafana assigns it
        "schemaVersion": {"type": "integer", "minimum": 36},
        "version": {"type": "integer"},
        "editable": {"type": "boolean"},
        "refresh": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "contains": {"const": "ha-ops"}},
        "time": {"type": "object", "required": ["from", "to"]},
        "panels": {"type": "array", "minItems": 1, "items": _PANEL},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "type"]},
                    "contains": {
                        "type": "object",
                        "properties": {
                            "name": {"const": "DS_PROMETHEUS"},
                            "type": {"const": "datasource"},
                            "query": {"const": "prometheus"},
                        },
                        "required": ["name", "type", "query"],
                    },
                }
            },
        },
        "annotations": {"type": "object", "required": ["list"]},
    },
}


# --- what the exporters expose --------------------------------------------------------------------------------
def exposed_names(text: str) -> set[str]:
    """Every series name a scrape of `text` (exposition format) can hold: each family with the suffixes its type
    gives it, whether or not it has samples now, and every sample's name."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "summary": ["", "_sum", "_count"]}
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, [""]))
        names.update(sample.name for sample in family.samples)
    return names


def scrape(*collectors: Collector) -> str:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    return generate_latest(registry).decode()


def agent_exposition() -> str:
    """The agent's metrics after a sweep that found GPU 1 faulty (an XID 79 and a double-bit ECC error)."""
    now = 1_800_000_000.0

    def sample(index: int, **changes: object) -> GpuSample:
        state = {k: v for k, v in healthy_state("gpu1", index).items() if k in READING_FIELDS}
        state.update(changes)
        return GpuSample(index=index, read_at=now, **state)  # type: ignore[arg-type]

    events = [GpuEvent(1, "xid", xid=79, at=now), GpuEvent(1, "ecc_double_bit", at=now)]
    ledger = EventLedger()
    ledger.record(events, now, 600)
    samples = [sample(0), sample(1, ecc_volatile_uncorrected=1)]
    collector = AgentCollector("gpu1")
    verdict = evaluate(samples, {}, ledger, now, Thresholds())
    collector.update(samples, verdict)
    stats = collector.stats  # what the agent's sweep counts
    stats.sweeps, stats.read_errors = 3, 1
    for seconds in (0.05, 0.04, 0.3):
        stats.observe_sweep(seconds)
    stats.findings.update((f.check, str(f.severity)) for f in verdict.findings)
    stats.events.update((e.gpu, e.kind, e.xid) for e in events)
    return scrape(collector)


def controller_exposition(tmp_path: Path) -> str:
    """The leading remediation controller's metrics with a node taken out of service and an audit sink."""
    rig = Rig(tmp_path)
    rig.c.lease_step()
    assert rig.c.is_leader
    rig.c.handle_report(report("n1"))
    rig.c.shipper = SimpleNamespace(shipped_seq=0, pending=lambda: 1, dropped=0)  # type: ignore[assignment]
    return generate_latest(rig.c.registry).decode()


def storage_exposition() -> str:
    class Master:
        def health(self) -> StorageHealth:
            return StorageHealth(True, ["cs1", "cs2"], 1, 100, 3, 1, 0, 2**40, 2**39)

    return scrape(StorageCollector(Master(), expected_chunkservers=3))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    texts = [agent_exposition(), controller_exposition(tmp_path_factory.mktemp("controller")), storage_exposition()]
    names = set().union(*(exposed_names(t) for t in texts))
    # The collectors ran as a scrape runs them: the families the dashboards lean on are all there.
    assert {"ha_ops_gpu_health", "ha_ops_node_health", "ha_ops_controller_node_phase", "ha_ops_audit_ship_pending",
            "ha_ops_storage_chunks_missing", "ha_ops_gpu_events_total"} <= names  # fmt: skip
    return names


# --- reading the dashboards -----------------------------------------------------------------------------------
def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every query: panel targets, query variables (inside label_values) and annotations."""
    found = [(f"panel {p['id']} ({p['title']})", t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
            match = _LABEL_VALUES.match(query)
            assert match, f"variable {variable['name']}: only label_values(METRIC, LABEL) is used here: {query}"
            found.append((f"variable {variable['name']}", match.group(1)))
    found.extend((f"annotation {a['name']}", a["expr"]) for a in dashboard["annotations"]["list"] if "expr" in a)
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers outside strings, label matchers, durations and
    grouping clauses that are not a function (followed by a parenthesis), a keyword or a number. Unbalanced
    brackets are refused."""
    text = _VARIABLE.sub("", _STRING.sub('""', expr))
    depth = {"(": 0, "[": 0, "{": 0}
    closing = {")": "(", "]": "[", "}": "{"}
    for char in text:
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            assert depth[closing[char]] >= 0, f"unbalanced {char!r} in {expr}"
    assert not any(depth.values()), f"unbalanced brackets in {expr}"
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", " ", text)  # ranges and subqueries
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group(1)
        if name.lower() in KEYWORDS or re.match(r"\s*\(", text[match.end() :]):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (node, gpu) (rate(a_total{node=~"$node", k="x"}[$__rate_interval]))', {"a_total"}),
        ("b / on (instance) group_left (id) c offset 5m > bool 0.5e3", {"b", "c"}),
        ('count_over_time((d{phase=~"x|y"} == 1)[1h:15s]) * 15 or vector(0)', {"d"}),
        ('label_replace(e, "to", "$1", "from", "(.*)") unless ignoring (x) f', {"e", "f"}),
        ("histogram_quantile(0.9, sum without (le) (g_bucket)) + inf", {"g_bucket"}),
    ],
)
def test_the_extractor_finds_the_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_the_extractor_refuses_unbalanced_brackets() -> None:
    with pytest.raises(AssertionError, match="unbalanced"):
        metric_names("sum(rate(a[5m])")


def test_there_are_the_three_dashboards() -> None:
    assert [p.name for p in DASHBOARDS] == ["fleet-gpu-health.json", "gamedays.json", "remediation.json"]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_each_dashboard_passes_the_schema_check(path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(load(path), SCHEMA)


def test_uids_and_titles_are_unique() -> None:
    dashboards = [load(p) for p in DASHBOARDS]
    assert len({d["uid"] for d in dashboards}) == len({d["title"] for d in dashboards}) == len(dashboards)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_is_well_formed(path: Path) -> None:
    dashboard = load(path)
    assert {"title", "uid", "panels", "schemaVersion", "templating"} <= set(dashboard)
    assert dashboard["schemaVersion"] >= 36
    every = panels(dashboard)
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids)), f"{path.name}: panel ids repeat"
    for panel in every:
        where = f"{path.name}: panel {panel['id']} ({panel.get('title')})"
        assert panel["type"] in PANEL_TYPES, where
        pos = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(pos) and pos["x"] + pos["w"] <= 24, where
        if panel["type"] in ("row", "text"):
            assert not panel.get("targets"), where
            continue
        assert panel["datasource"] == DATASOURCE, where
        targets = panel["targets"]
        assert targets, f"{where}: no query"
        assert len({t["refId"] for t in targets}) == len(targets), where
        for target in targets:
            assert target["datasource"] == DATASOURCE and target["expr"].strip(), where


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_metric_a_dashboard_names_is_exported(path: Path, exported: set[str]) -> None:
    known = exported | PROMETHEUS_SERIES
    used: set[str] = set()
    for where, expr in queries(load(path)):
        names = metric_names(expr)
        assert names, f"{path.name}: {where} reads no metric: {expr}"
        unknown = names - known
        assert not unknown, f"{path.name}: {where} names {sorted(unknown)}, which no ha-ops exporter exposes: {expr}"
        used |= names
    assert len(used - PROMETHEUS_SERIES) >= 8, f"{path.name}: {sorted(used)}"


def test_a_metric_nobody_exports_is_caught(exported: set[str]) -> None:
    assert metric_names('ha_ops_gpu_temperature{node="gpu1"}') - exported == {"ha_ops_gpu_temperature"}
    assert metric_names("rate(ha_ops_agent_sweeps[5m])") - exported == {"ha_ops_agent_sweeps"}  # the _total


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) is not installed")
def test_promtool_parses_every_query(tmp_path: Path) -> None:
    """Each query as a recording rule, Grafana's variables filled as Grafana fills them, for promtool to parse."""
    rules = []
    for path in DASHBOARDS:
        for _where, expr in queries(load(path)):
            filled = re.sub(r"\$\{?__\w+\}?", "5m", expr)  # $__rate_interval, $__interval, $__range
            filled = _VARIABLE.sub(".*", filled)  # $node in a regex matcher
            rules.append({"record": f"dashboard:{path.stem.replace('-', '_')}:{len(rules)}", "expr": filled})
    file = tmp_path / "dashboard-queries.yml"
    file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    done = subprocess.run(["promtool", "check", "rules", str(file)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_provisioning_files() -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "ha-ops.yaml").read_text())
    assert datasources["apiVersion"] == 1
    (prometheus,) = datasources["datasources"]
    assert prometheus["type"] == "prometheus" and prometheus["access"] == "proxy" and prometheus["url"]
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "ha-ops.yaml").read_text())
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")


# --- the exporters' metric names ------------------------------------------------------------------------------
def expositions(tmp_path: Path) -> dict[str, str]:
    return {"agent": agent_exposition(), "controller": controller_exposition(tmp_path), "storage": storage_exposition()}


def test_metric_names_follow_prometheus_conventions(tmp_path: Path) -> None:
    """Base units, ratios not percentages, `_total` for counters only, and no port shared with dcgm-exporter's."""
    for exporter, text in expositions(tmp_path).items():
        for family in text_string_to_metric_families(text):
            where = f"{exporter}: {family.name} ({family.type})"
            assert family.name.startswith("ha_ops_"), where
            assert not re.search(r"_(percent|pct|milliseconds|ms|celsius_x10)$", family.name), where
            assert family.type == "counter" or not family.name.endswith("_total"), where
            assert family.documentation, where
    from ha_ops.spec.model import Monitoring

    assert Monitoring.model_fields["agent_port"].default != 9400  # dcgm-exporter's default: both run on a GPU node


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) is not installed")
def test_promtool_check_metrics_is_clean_for_every_exporter(tmp_path: Path) -> None:
    for exporter, text in expositions(tmp_path).items():
        done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), (
            f"{exporter}: {done.stdout}{done.stderr}"
        )
