"""Every input parser, fuzzed: whatever the input, the parser returns or refuses it with ha-ops' own error (exit 2
naming the field, or a 400 from the controller's API). A traceback (TypeError, RecursionError, UnicodeDecodeError,
a bare ValueError) is a failure, and so is garbage accepted: an input the parser's oracle (fuzz_oracles.py) knows
must be refused (NaN or 1e308 seconds, GPU 256, a URL that is not one, a node listed twice, template syntax in a
spec string...) that the parser took. The hostile inputs the issue found are tried on each parser, then hypothesis
mutates a valid example of each: values replaced, keys dropped and added, the text cut and spliced; the examples of
issue 44's findings 8 and 9 are fed to their parsers and oracles as they are.

`tests/bench/fuzz_parsers.py` runs more examples and prints, per parser, the inputs tried and how each ended: a clean
error, a traceback, garbage accepted (HA_OPS_FUZZ_FIGURES)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha_ops.errors import HaOpsError
from ha_ops.remediation.server import AlertmanagerWebhook, BadRequest, parse_body
from tests.unit.fuzz_oracles import FINDINGS, FLEET, garbage
from tests.unit.fuzz_rules import dropped, paths_in, replaced, value_at

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("HA_OPS_FUZZ_EXAMPLES", "60"))
FIGURES = os.environ.get("HA_OPS_FUZZ_FIGURES")  # a folder: per parser, its inputs' outcomes counted, for the bench
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))  # fmt: skip


def _report() -> dict[str, Any]:
    return {"node": "gpu1", "seq": 3, "agent_id": "a1", "sent_at": 1.0, "state": "unhealthy", "action": "drain",
            "reason": "XID 79", "gpus": [{"index": 0, "state": "unhealthy"}],
            "findings": [{"check": "xid", "severity": "critical", "action": "drain", "message": "XID 79", "gpu": 0,
                          "xid": 79}]}  # fmt: skip


def _webhook() -> dict[str, Any]:
    return {"version": "4", "status": "firing", "alerts": [
        {"status": "firing", "labels": {"alertname": "HaOpsGpuNodeUnhealthy", "node": "gpu1"},
         "annotations": {"summary": "x"}, "startsAt": "2026-01-01T00:00:00Z"}]}  # fmt: skip


def _agent_config() -> dict[str, Any]:
    # reporting to the controllers over TLS: their URLs are fuzzed too (issue 44, finding 8)
    return {"node": "gpu1", "backend": "fake", "controller": {
        "urls": ["https://10.0.0.1:8800", "https://10.0.0.2:8800"],
        "tls": {"ca_file": "/tmp/fz/ca.crt", "cert_file": "/tmp/fz/a.crt", "key_file": "/tmp/fz/a.key"}}}  # fmt: skip


def _controller_config() -> dict[str, Any]:
    return {"id": "ctl1", "state_dir": "/tmp/fz/state", "partition": "gpu", "peers": ["https://10.0.0.2:8800"],
            "lease_ttl_s": 10, "lease_renew_s": 3, "lease_margin_s": 2,
            "tls": {"ca_file": "/tmp/fz/ca.crt", "cert_file": "/tmp/fz/s.crt", "key_file": "/tmp/fz/s.key"},
            "pools": {"gpu": {"nodes": ["gpu1", "gpu2"], "spares": ["gpu3"]}},
            "access": {"reset_gpu_command": "nvidia-smi -r -i {gpu}", "reboot_command": "reboot"},
            # the watch over TLS with a password: its fields are fuzzed too
            "monitoring": {"prometheus_url": "https://10.0.0.9:9090", "alertmanager_url": "https://10.0.0.9:9093",
                           "client": {"tls": {"ca_file": "/tmp/fz/ca.crt", "cert_file": "/tmp/fz/c.crt",
                                              "key_file": "/tmp/fz/c.key"},
                                      "username": "ha-ops", "password_file": "/tmp/fz/pw"}}}  # fmt: skip


def _failover_config() -> dict[str, Any]:
    return {"id": "mfsml", "master_host": "mfsm", "master_address": "10.0.0.5", "peers": ["cs1"],
            "fence_command": "ssh {node} true", "promote_command": "mfsmetarestore",
            "state_dir": "/tmp/fz/s"}  # fmt: skip


def _state() -> dict[str, Any]:
    from ha_ops.remediation.model import ControllerState

    return json.loads(ControllerState().model_dump_json())


def _journal() -> list[Any]:
    return [{"key": "gpu:gpu3:0", "undo": [], "at": 1.0}]


def _yaml_file(name: str) -> Callable[[], Any]:
    return lambda: yaml.safe_load((REPO / name).read_text())


def _plan() -> dict[str, Any]:
    plan = yaml.safe_load((REPO / "chaos/gamedays/gpu.yaml").read_text())
    for fault in plan["faults"]:
        fault["experiment"] = str((REPO / "chaos/gamedays" / fault["experiment"]).resolve())
    return plan


def _load_experiment(path: Path) -> object:
    from ha_ops.chaos.runner import load_experiment

    return load_experiment(path, cluster={"ha_ops_target": "lab:fuzz"})


def _runbook() -> dict[str, Any]:
    """The GPU runbook as its front matter (fuzzed field by field) and its Markdown body, written back between '---'
    lines (write)."""
    front, body = (REPO / "runbooks/gpu-failure.md").read_text()[4:].split("\n---\n", 1)
    data = yaml.safe_load(front)
    data["trigger"]["experiment"] = str((REPO / "runbooks" / data["trigger"]["experiment"]).resolve())
    return {"front": data, "body": body}


def _load_runbook(path: Path) -> object:
    from ha_ops.runbooks.verify import load_runbook

    return load_runbook(path)


def _rollout_policy() -> dict[str, Any]:
    return {"canary": "2", "waves": ["5%", "rest"], "max_unavailable": "10%", "skip": ["gpu9"],
            "drain": {"mode": "wait", "timeout_s": 600}, "soak_s": 60, "burn_in_command": "nvidia-smi"}  # fmt: skip


def _read_rollout_policy(path: Path) -> object:
    """The policy file planned against FLEET, as `ha-ops rollout` reads and plans it (request.plan_request): a canary
    is judged against the fleet (issue 44, finding 8)."""
    from ha_ops.rollout.plan import FleetNode, plan_rollout
    from ha_ops.rollout.request import policy_from

    fleet = [FleetNode(name, f"rack{i % 2}", driver_version="550.1") for i, name in enumerate(FLEET)]
    return plan_rollout(fleet, policy_from(path, {})[0], "570.2")


def _parse_report(path: Path) -> object:
    from ha_ops.health.report import AgentReport

    return parse_body(path.read_bytes(), AgentReport, "agent report")


def _parse_webhook(path: Path) -> object:
    return parse_body(path.read_bytes(), AlertmanagerWebhook, "Alertmanager webhook")


def _certificate_request() -> dict[str, Any]:
    from ha_ops.security.issuer import new_request

    return {"csr": new_request("gpu1")[1]}


def _parse_certificate_request(path: Path) -> object:
    from ha_ops.remediation.server import CertificateRequest

    return parse_body(path.read_bytes(), CertificateRequest, "certificate request")


def _verify_audit(path: Path) -> object:
    """As `ha-ops audit verify` judges a log: its problems, each naming the line, are its refusal (exit 1)."""
    from ha_ops.remediation.audit import verify

    if problems := verify(path):
        raise HaOpsError("; ".join(problems))
    return problems


def _read_journal(path: Path) -> object:
    from ha_ops.chaos.faults import read_journal

    return read_journal(path)


def _read_state(path: Path) -> object:
    from ha_ops.remediation.store import read_state

    return read_state(path)


def _read_rollout(path: Path) -> object:
    from ha_ops.rollout.state import RolloutStore

    return RolloutStore(path.parent).load()


def _gameday_report() -> dict[str, Any]:
    # the standard game day's report as `gameday run` writes it (gameday.json), as test_plan_gameday builds it
    from tests.unit.test_plan_gameday import standard_report

    return standard_report()


def _read_gameday(path: Path) -> object:
    from ha_ops.plan.gameday_input import read_gameday
    from ha_ops.plan.presets import PRESETS

    return read_gameday(path, PRESETS["nhc-5min"])


def _loader(module: str, name: str) -> Callable[[Path], object]:
    def load(path: Path) -> object:
        import importlib

        return getattr(importlib.import_module(module), name)(path)

    return load


def _rollout_state() -> dict[str, Any]:
    from ha_ops.rollout.plan import FleetNode, plan_rollout
    from ha_ops.rollout.policy import build_policy
    from ha_ops.rollout.state import new_state

    nodes = [FleetNode(f"n{i}", f"rack{i % 2}", driver_version="550.1") for i in range(1, 5)]
    policy = build_policy({"canary": "1", "max_unavailable": "1"})
    return json.loads(new_state(plan_rollout(nodes, policy, "570.2"), policy, "r1", 1.0).model_dump_json())


# name -> (a valid example's data, how it is written, the parser reading that file)
PARSERS: dict[str, tuple[Callable[[], Any], str, Callable[[Path], object]]] = {
    "cluster spec": (_yaml_file("examples/lab.yaml"), "yaml", _loader("ha_ops.spec", "load_spec")),
    "agent config": (_agent_config, "yaml", _loader("ha_ops.health.config", "load_agent_config")),
    "controller config": (_controller_config, "yaml",
                          _loader("ha_ops.remediation.config", "load_controller_config")),
    "storage failover config": (_failover_config, "yaml", _loader("ha_ops.storage.failover", "load_failover_config")),
    "game-day plan": (_plan, "yaml", _loader("ha_ops.chaos.plan", "load_plan")),
    "chaos experiment": (_yaml_file("chaos/experiments/gpu-xid79.yaml"), "yaml", _load_experiment),
    "agent report (API)": (_report, "json", _parse_report),
    "Alertmanager webhook (API)": (_webhook, "json", _parse_webhook),
    "certificate request (API)": (_certificate_request, "json", _parse_certificate_request),
    "controller state": (_state, "json", _read_state),
    "fault journal": (_journal, "json", _read_journal),
    "audit log": (lambda: None, "audit", _verify_audit),
    "runbook": (_runbook, "runbook", _load_runbook),
    "rollout state": (_rollout_state, "json", _read_rollout),
    "rollout policy (--policy)": (_rollout_policy, "yaml", _read_rollout_policy),
    "game-day report": (_gameday_report, "json", _read_gameday),
}  # fmt: skip

# The classes of input the issue found (each at the top, and in place of a value below): deep nesting, 5,000-digit
# integers, an impossible date, non-UTF-8 bytes, NUL bytes, over-long and hostile names, NaN.
HOSTILE_TEXT: list[bytes] = [
    b"[" * 5000 + b"]" * 5000,
    b"a: " + b"{b: " * 3000 + b"1" + b"}" * 3000,
    b"9" * 5000,
    b"a: " + b"9" * 5000,
    b"a: 2024-02-30",
    b"\xff\xfe\x00bad",
    b"node: gpu1\x00\nbackend: fake",
    b"",
    b"- 1\n- 2",
    b"~",
]
HOSTILE_VALUES: list[Any] = [
    None, "", "x" * 100_000, "gpu7;touch /tmp/x;#", "a\x00b", "line\nInjected=1", float("nan"), float("inf"),
    int("9" * 4000), -1, 2**63, True, [], {}, [[[[[[]]]]]], {"": None}, "2024-02-30",
]  # fmt: skip


def write(path: Path, data: Any, kind: str) -> None:
    """The example as its parser reads it from a file."""
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif kind == "json":
        path.write_text(json.dumps(data, default=str))
    elif kind == "yaml":
        path.write_text(yaml.safe_dump(data, allow_unicode=True) if not isinstance(data, str) else data)
    elif kind == "audit":
        path.write_text(data if isinstance(data, str) else "")
    elif kind == "runbook" and isinstance(data, dict) and set(data) <= {"front", "body"}:
        body = data.get("body")  # (the front matter between '---' lines, then the body)
        front = yaml.safe_dump(data.get("front"), allow_unicode=True)
        path.write_text(f"---\n{front}---\n" + (body if isinstance(body, str) else yaml.safe_dump(body)))
    else:
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))


def input_path(name: str, folder: Path) -> Path:
    kind = PARSERS[name][1]
    return folder / ("state.json" if name == "rollout state" else f"input.{'md' if kind == 'runbook' else kind}")


def tally(name: str, outcome: str) -> None:
    """One more input of parser `name` ended in `outcome` (clean, accepted, traceback; known: garbage by its oracle;
    garbage: accepted though known garbage), for the bench."""
    if FIGURES:
        counts = Path(FIGURES) / f"{name}.{outcome}"
        counts.write_text(str(int(counts.read_text()) + 1 if counts.exists() else 1))


def parse(name: str, data: Any, folder: Path) -> str:
    """Run the parser: only its own refusals may come out ("clean"), and what it accepts ("accepted") must not be
    garbage by its oracle."""
    parser = PARSERS[name][2]
    folder.mkdir(parents=True, exist_ok=True)
    path = input_path(name, folder)
    write(path, data, PARSERS[name][1])
    outcome = "traceback"  # (unless the parser returns or refuses)
    try:
        parser(path)
        outcome = "accepted"
    except (HaOpsError, BadRequest):
        outcome = "clean"
    finally:
        tally(name, outcome)
    if (why := garbage(name, data, folder)) is not None:
        tally(name, "known")  # (the oracle's garbage, refused or not: what the figures say it could fail on)
        if outcome == "accepted":
            tally(name, "garbage")
            pytest.fail(f"{name} accepted garbage: {why}")
    return outcome


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.sampled_from(HOSTILE_VALUES),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_the_valid_example_parses(name: str, tmp_path: Path) -> None:
    example, kind, parser = PARSERS[name]
    path = input_path(name, tmp_path)
    write(path, example(), kind)
    parser(path)  # the example is valid: no refusal either (else the mutations below would test nothing)
    assert garbage(name, example(), tmp_path) is None  # nor garbage by its oracle (which would then judge nothing)


@pytest.mark.parametrize("name", sorted(PARSERS))
@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=lambda t: t[:12].decode("latin-1").replace("\n", " "))
def test_hostile_text_is_refused_without_a_traceback(name: str, text: bytes, tmp_path: Path) -> None:
    parse(name, text, tmp_path)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_mutated_examples_are_parsed_or_refused_without_a_traceback(
    name: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    example = PARSERS[name][0]()
    if not isinstance(example, dict | list):
        example = {"text": example}
    places = paths_in(example)
    folder = tmp_path_factory.mktemp("fuzz")

    @SETTINGS
    @given(st.data())
    def check(data: st.DataObject) -> None:
        doc = example
        for _ in range(data.draw(st.integers(1, 3))):
            here = paths_in(doc)
            place = data.draw(st.sampled_from(here or places))
            how = data.draw(st.sampled_from(["replace", "hostile", "drop", "add"]))
            if how == "replace":
                doc = replaced(doc, place, data.draw(json_values))
            elif how == "hostile":
                doc = replaced(doc, place, data.draw(st.sampled_from(HOSTILE_VALUES)))
            elif how == "drop" and place:
                doc = dropped(doc, place)
            elif how == "add" and isinstance(inner := value_at(doc, place), dict):
                doc = replaced(doc, place, {**inner, data.draw(st.text(max_size=8)): data.draw(json_values)})
        if isinstance(doc, dict) and set(doc) == {"text"} and isinstance(doc["text"], str):
            doc = doc["text"]
        parse(name, doc, folder)

    check()


# Paths no file can have, in the fields that name a file relative to their document (issue 44, finding 7: a NUL
# byte or a name over 255 bytes in an experiment path came out as a traceback, exit 70).
IMPOSSIBLE_PATHS = ["x\x00y.yaml", "a" * 300 + ".yaml", "/".join(["b" * 200] * 30), "no-such-experiment.yaml", "."]


@pytest.mark.parametrize("path", IMPOSSIBLE_PATHS, ids=["NUL", "name-over-255", "path-over-4096", "missing", "dir"])
@pytest.mark.parametrize("name", ["game-day plan", "runbook"])
def test_an_experiment_path_no_file_can_have_is_refused_naming_its_field(name: str, path: str, tmp_path: Path) -> None:
    example, kind, parser = PARSERS[name]
    document = example()
    if name == "game-day plan":
        document["faults"][0]["experiment"] = path
        field = "faults[" + document["faults"][0]["name"] + "].experiment"
    else:
        document["front"]["trigger"]["experiment"] = path
        field = "trigger.experiment"
    source = input_path(name, tmp_path)
    write(source, document, kind)
    assert garbage(name, document, tmp_path) is not None  # (the oracle knows it too)
    with pytest.raises(HaOpsError) as refused:
        parser(source)
    assert getattr(refused.value, "problems", [""])[0].startswith(f"{field}: "), refused.value


@pytest.mark.parametrize(("name", "what", "mutate"), FINDINGS, ids=[f"{n}: {w}" for n, w, _ in FINDINGS])
def test_the_garbage_of_issue_44_is_garbage_to_the_oracles_and_refused(
    name: str, what: str, mutate: Callable[[Any], None], tmp_path: Path
) -> None:
    """Findings 8 and 9's examples, each on the parser that took it: its oracle calls it garbage (so the fuzz can
    fail on it) and the parser refuses it with its own error."""
    document = PARSERS[name][0]()
    mutate(document)
    assert garbage(name, document, tmp_path) is not None, what
    assert parse(name, document, tmp_path) == "clean", what
