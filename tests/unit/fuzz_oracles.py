"""The fuzz's oracles (issue 44, finding 8): per parser of tests/unit/test_parsers_fuzz.py, what its document must
never hold, so that an input the parser accepts can be found to be garbage (an input that parsed but meant nothing).

An oracle knows only garbage: each rule names places in the document (fuzz_rules.places) and says why a value there
is one the parser must refuse, and each check looks at the document whole (a node listed twice, a lease renewed
after it ran out, a canary bigger than the fleet). It never says "valid": the parser may refuse more. So a rule is
written only where the project must refuse the value whatever its models say today, and one the parser does not keep
fails the fuzz ("garbage accepted"): it is mended in the parser, never by dropping the rule."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.unit.fuzz_rules import (
    ANY,
    DEEP,
    EACH,
    Rule,
    amount,
    command,
    condition,
    count,
    experiment_file,
    fraction,
    host,
    host_port,
    node_name,
    number_in,
    one_of,
    pause,
    places,
    plain_text,
    python_provider,
    runbook_command,
    seconds,
    spec_host,
    unique,
    url,
)

Check = Callable[[Any], str | None]  # why the whole document is garbage, or None
# What the rollout policy is planned against (test_parsers_fuzz reads the file and plans, as `ha-ops rollout` does):
# nine GPU nodes, none down, none on the target version.
FLEET = tuple(f"gpu{i}" for i in range(1, 10))


def listed_once(*patterns: tuple[Any, ...]) -> Check:
    """No name at any of `patterns` is there twice (a node in two pools, two failure domains of one name)."""

    def why(document: Any) -> str | None:
        first: dict[str, tuple[Any, ...]] = {}
        for pattern in patterns:
            for path, name in places(document, pattern):
                if isinstance(name, str) and (where := first.setdefault(name, path)) != path:
                    return f"{name!r:.40} is listed twice ({where} and {path})"
        return None

    return why


def lease_order(document: Any) -> str | None:
    """A leader renews before its lease can run out: 0 < renew < ttl - margin (the defaults where left out)."""
    if not isinstance(document, dict):
        return None
    ttl, renew, margin = (number_in(document.get(k, d)) for k, d in
                          (("lease_ttl_s", 3.0), ("lease_renew_s", 1.0), ("lease_margin_s", 0.5)))  # fmt: skip
    if ttl is None or renew is None or margin is None or not all(map(math.isfinite, (ttl, renew, margin))):
        return None  # (a value that is no finite number: the rules over the fields judge it)
    return None if 0 < renew < ttl - margin else f"lease_renew_s {renew:g} is not under {ttl:g} - {margin:g}"


def planned_canary(document: Any) -> str | None:
    """The canary against FLEET (issue 44, finding 8: `--canary 99999999999999999999` made the whole fleet the canary):
    a count from 1 to the fleet's size, a percentage, or fleet nodes named once, none of them skipped."""
    if not isinstance(document, dict) or "canary" not in document:
        return None
    canary, skip = document["canary"], document.get("skip", [])
    if isinstance(canary, int) and not isinstance(canary, bool):
        canary = str(canary)
    if isinstance(canary, str) and canary.strip().endswith("%"):
        return amount(rest=False)(canary)
    if isinstance(canary, str) and re.fullmatch(r"[0-9]+", canary.strip()):
        digits = canary.strip().lstrip("0")  # (the count, without turning 5,000 digits into an int)
        return None if 0 < len(digits) < 3 and int(digits) <= len(FLEET) else f"canary {digits[:30]} of {len(FLEET)}"
    names = [n.strip() for n in canary.split(",") if n.strip()] if isinstance(canary, str) else canary
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        return f"canary {canary!r:.40} is no count, percentage or node names"
    bad = [n for n in names if n not in FLEET or names.count(n) > 1 or (isinstance(skip, list) and n in skip)]
    return f"canary {bad[0]!r:.40}: not a fleet node, named twice, or skipped" if bad else None


def skipped_in_fleet(document: Any) -> str | None:
    skip = document.get("skip", []) if isinstance(document, dict) else []
    bad = [n for n in skip if n not in FLEET] if isinstance(skip, list) else [skip]
    return f"skip {bad[0]!r:.40} is not a node of the fleet" if bad else None


def rest_last(document: Any) -> str | None:
    waves = document.get("waves") if isinstance(document, dict) else None
    if isinstance(waves, list) and any(isinstance(w, str) and w.strip().lower() == "rest" for w in waves[:-1]):
        return "waves: 'rest' before the last wave"
    return None


def recovered_after_detected(document: Any) -> str | None:
    for path, fault in places(document, ("faults", EACH)):
        if isinstance(fault, dict):
            detect, recover = number_in(fault.get("time_to_detect_s")), number_in(fault.get("time_to_recover_s"))
            if detect is not None and recover is not None and recover < detect:
                return f"{path}: recovered ({recover:g}) before detected ({detect:g})"
    return None


def signed_request(document: Any) -> str | None:
    """{"csr": PEM}: a certificate request signed by its own key."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm

    if not isinstance(document, dict) or set(document) != {"csr"} or not isinstance(document["csr"], str):
        return "not {csr: PEM}"
    try:
        if x509.load_pem_x509_csr(document["csr"].encode()).is_signature_valid:
            return None
    except (ValueError, UnicodeEncodeError, UnsupportedAlgorithm):
        pass
    return "csr is not a signed PEM certificate request"


def json_lines(document: Any) -> str | None:
    """An audit log (its text): one JSON object per line."""
    for number, line in enumerate(document.splitlines() if isinstance(document, str) else [], start=1):
        try:
            entry = json.loads(line) if line.strip() else {}
        except (ValueError, RecursionError):
            entry = None
        if not isinstance(entry, dict):
            return f"line {number} is not a JSON object"
    return None


def journal(document: Any) -> str | None:
    """The fault journal: a list of {key: text, undo: [operations]}."""
    if not isinstance(document, list):
        return "not a list of faults"
    for i, entry in enumerate(document):
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str) and isinstance(entry.get("undo", []),
                                                                                             list)):  # fmt: skip
            return f"[{i}] is not a fault with a key and a list of undo operations"
    return None


def version(*readable: object) -> Check:
    return lambda d: (
        None if isinstance(d, dict) and d.get("version") in readable else f"not a version {readable} object"
    )


def webhook(document: Any) -> str | None:
    return None if isinstance(document, dict) and document.get("version") == "4" else "not an Alertmanager v4 webhook"


def mapping(value: Any) -> str | None:
    return None if isinstance(value, dict) else f"{value!r:.40} is not a mapping"


def non_empty(value: Any) -> str | None:
    return "empty" if value == "" else None


finite = seconds(-math.inf, high=math.inf)
STATES = ("healthy", "degraded", "unhealthy", "unknown")
ACTIONS = ("none", "watch", "drain", "reset_gpu", "reboot_node", "replace")
_SPEC_NAMES = [
    ("name",), ("failure_domains", EACH, "name"), ("controllers", "hosts", EACH, "name"),
    ("controllers", "hosts", EACH, "domain"), ("pools", EACH, "name"), ("pools", EACH, "domains", EACH),
    ("monitoring", "host", "name"), ("monitoring", "host", "domain"), ("schedulers", "slurm", "cluster_name"),
    ("schedulers", "slurm", "partition"),
]  # fmt: skip
_SLURM_TIMEOUTS = ("slurmctld_timeout_s", "slurmd_timeout_s", "message_timeout_s")
_FABRIC = ("spines", "leaves", "uplinks_per_leaf", "bfd_interval_ms", "bfd_multiplier")
_PORTS = ("prometheus_port", "alertmanager_port", "agent_port")
SPEC: list[Rule] = [
    ((DEEP,), plain_text),  # issue 44, findings 8 and 9: every spec string may reach the inventory
    *((p, spec_host) for p in _SPEC_NAMES),
    *((("fabric", k), count(1)) for k in _FABRIC),
    (("pools", EACH, "count"), count(1)),
    (("pools", EACH, "gpus_per_node"), count(1, 256)),  # (GPU indices are 0..255)
    # More CPUs or MiB than a C int holds is no machine's (Slurm keeps a node's CPUs in a C int)
    (("pools", EACH, "cpus_per_node"), count(1, 2**31 - 1)),
    (("pools", EACH, "memory_mb"), count(1, 2**31 - 1)),
    (("pools", EACH, "spare_fraction"), fraction(0, 0.5)),
    *((("monitoring", p), count(1, 65535)) for p in _PORTS),
    (("monitoring", "scrape_interval_s"), seconds(above=True)),
    *((("schedulers", "slurm", k), seconds(above=True)) for k in _SLURM_TIMEOUTS),
    (("remediation", "port"), count(1, 65535)),
    (("remediation", "breaker_max_nodes"), count(1)),
    (("remediation", "breaker_max_fraction"), fraction(above=True)),
    (("remediation", "min_healthy_fraction"), fraction()),
    (("remediation", "breaker_window_s"), seconds(above=True)),
    (("remediation", "max_cordons_per_minute"), count(1)),
]
POLICY: list[Rule] = [
    (("drain", "timeout_s"), seconds(above=True)),
    (("drain", "mode"), one_of("wait", "requeue")),
    (("soak_s",), seconds()),
    (("burn_in_timeout_s",), seconds(above=True)),
    (("waves", EACH), amount(rest=True)),
    (("max_unavailable",), amount(rest=False)),
    (("wave_max_failure_fraction",), fraction()),
    (("canary_max_failures",), count(0)),
]
CONTROLLER: list[Rule] = [
    (("peers", EACH), url),  # issue 44, finding 8: controller URLs that are not URLs
    (("monitoring", "prometheus_url"), url),
    (("monitoring", "alertmanager_url"), url),
    (("pools", ANY, "nodes", EACH), node_name),
    (("pools", ANY, "spares", EACH), node_name),
    (("lease_ttl_s",), seconds(above=True)),
    (("lease_renew_s",), seconds(above=True)),
    (("lease_margin_s",), seconds()),
    (("port",), count(1, 65535)),
    (("access", "reset_gpu_command"), command("gpu", "node")),
    (("access", "reboot_command"), command("node")),
]
REPORT: list[Rule] = [
    (("node",), node_name),
    (("seq",), count(0, 2**53)),
    (("sent_at",), finite),
    (("agent_id",), non_empty),
    (("state",), one_of(*STATES)),
    (("action",), one_of(*ACTIONS)),
    (("findings", EACH, "severity"), one_of("info", "warning", "critical")),
    (("findings", EACH, "action"), one_of(*ACTIONS)),
    (("findings", EACH, "gpu"), count(0, 255)),  # issue 44, finding 8: GPU index 256
    (("findings", EACH, "xid"), count(0, 2**31)),
    (("gpus", EACH, "index"), count(0, 255)),
    (("gpus", EACH, "state"), one_of(*STATES)),
]
_CONDITIONS = [("abort_when", EACH), ("steady", EACH)] + [
    p for k in ("detect", "recover") for p in (("faults", EACH, k), ("faults", EACH, k, EACH))
]
_PROVIDERS = [("method", EACH, "provider"), ("rollbacks", EACH, "provider"),
              ("steady-state-hypothesis", "probes", EACH, "provider")]  # fmt: skip


def _plan(folder: Path) -> list[Rule]:
    return [
        (("pause_between_s",), seconds()),
        (("limits", "max_concurrent_faults"), count(1)),
        (("faults", EACH, "timeout_s"), seconds(above=True)),
        (("faults", EACH, "experiment"), experiment_file(folder)),
        *((p, condition) for p in _CONDITIONS),  # issue 44, finding 8: probe arguments the probe cannot take
    ]


def _runbook(folder: Path) -> list[Rule]:
    """The front matter (test_parsers_fuzz writes it between '---' lines), for the main form and each case."""
    rules: list[Rule] = []
    for form in [("front",), ("front", "cases", EACH)]:
        rules += [
            ((*form, "trigger", "experiment"), experiment_file(folder)),
            ((*form, "trigger", "max_faults"), count(1, 4)),
            ((*form, "checks", EACH), condition),
            ((*form, "checks", EACH, "within_s"), seconds(above=True)),
            ((*form, "manual", EACH, "run"), runbook_command),  # issue 44, finding 8: `run: '{0}'`
            ((*form, "manual", EACH, "lab_run"), runbook_command),
            ((*form, "manual", EACH, "timeout_s"), seconds(above=True)),
        ]
    return rules


_ROLLOUT_PHASES = ("planned", "running", "paused", "halted", "rolling_back", "completed", "aborted")
# parser (test_parsers_fuzz.PARSERS) -> its document's folder -> (rules over its places, checks over it whole)
ORACLES: dict[str, Callable[[Path], tuple[list[Rule], list[Check]]]] = {
    "cluster spec": lambda _: (SPEC, [listed_once(("failure_domains", EACH, "name")),
                                      listed_once(("controllers", "hosts", EACH, "name")),
                                      listed_once(("pools", EACH, "name"))]),
    "agent config": lambda _: ([(("node",), node_name), (("backend",), one_of("nvml", "fake")),
                                (("controller", "urls", EACH), url)], []),
    "controller config": lambda _: (CONTROLLER, [listed_once(("pools", ANY, "nodes", EACH),
                                                             ("pools", ANY, "spares", EACH)), lease_order]),
    "storage failover config": lambda _: ([(("peers", EACH), host_port), (("master_host",), host),
                                           (("master_address",), host), (("master_port",), count(1, 65535))],
                                          [unique(("peers",))]),
    "game-day plan": lambda folder: (_plan(folder), []),
    "chaos experiment": lambda _: ([(("method", EACH, "pauses", ANY), pause),
                                    *((p, python_provider) for p in _PROVIDERS)], []),
    "agent report (API)": lambda _: (REPORT, []),
    "Alertmanager webhook (API)": lambda _: ([(("alerts", EACH, "status"), one_of("firing", "resolved")),
                                              (("alerts", EACH, "labels"), mapping)], [webhook]),
    "certificate request (API)": lambda _: ([], [signed_request]),
    "controller state": lambda _: ([], [version(1, 2)]),
    "fault journal": lambda _: ([], [journal]),
    "audit log": lambda _: ([], [json_lines]),
    "runbook": lambda folder: (_runbook(folder), []),
    "rollout state": lambda _: ([*((("policy", *p), why) for p, why in POLICY), (("phase",), one_of(*_ROLLOUT_PHASES)),
                                 (("waves", EACH, "status"), one_of("pending", "running", "soaking", "done"))],
                                [version(1)]),
    "rollout policy (--policy)": lambda _: (POLICY, [planned_canary, skipped_in_fleet, rest_last]),
    "game-day report": lambda _: ([(("faults", EACH, k), seconds()) for k in ("time_to_detect_s", "time_to_recover_s")],
                                  [recovered_after_detected]),
}  # fmt: skip


def garbage(name: str, document: Any, folder: Path) -> str | None:
    """Why `document` (parser `name`'s, written in `folder`) is garbage its parser must refuse, or None."""
    if isinstance(document, bytes):
        return None  # (hostile text: only "no traceback" is asked of it)
    rules, checks = ORACLES[name](folder)
    for pattern, why in rules:
        for path, value in places(document, pattern):
            if (problem := why(value)) is not None:
                return f"{'.'.join(map(str, path)) or '(top)'}: {problem}"
    return next((problem for check in checks if (problem := check(document)) is not None), None)


def at(path: tuple[Any, ...], value: Any) -> Callable[[Any], None]:
    """A mutation of a parser's valid example: `value` put at `path`."""

    def mutate(document: Any) -> None:
        for part in path[:-1]:
            document = document[part]
        document[path[-1]] = value

    return mutate


# Issue 44's garbage (finding 8: what the campaign found accepted; finding 9: template syntax in the spec), each on
# the parser that took it, as a mutation of that parser's valid example (test_parsers_fuzz.PARSERS).
FINDINGS: list[tuple[str, str, Callable[[Any], None]]] = [
    ("agent config", "a controller URL that is no URL", at(("controller", "urls", 0), "ctl1:8800")),
    ("agent config", "a controller URL of another scheme", at(("controller", "urls", 1), "ftp://10.0.0.2:8800")),
    ("controller config", "a peer's URL that is no URL", at(("peers", 0), "not a url")),
    ("controller config", "a node listed twice in a pool", at(("pools", "gpu", "nodes"), ["gpu1", "gpu2", "gpu1"])),
    ("controller config", "a node both in service and a spare", at(("pools", "gpu", "spares"), ["gpu2"])),
    ("controller config", "lease_renew_s: 1e308", at(("lease_renew_s",), 1e308)),
    ("rollout policy (--policy)", "--canary 99999999999999999999", at(("canary",), "99999999999999999999")),
    ("chaos experiment", "pauses.after: NaN", at(("method", 0, "pauses", "after"), math.nan)),
    ("agent report (API)", "a finding on GPU 256", at(("findings", 0, "gpu"), 256)),
    ("agent report (API)", "GPU index 256", at(("gpus", 0, "index"), 256)),
    ("cluster spec", "a rack with a newline", at(("failure_domains", 0, "rack"), "r1\nInjected=1")),
    ("game-day plan", "probe arguments the probe cannot take", at(("faults", 0, "detect", "arguments"), {"nod": 1})),
    ("runbook", "run: '{0}'", at(("front", "manual", 0, "run"), "{0}")),
    ("cluster spec", "{{ in a rack", at(("failure_domains", 0, "rack"), "{{ lookup('pipe', 'touch /tmp/owned') }}")),
    ("cluster spec", "{% in a power feed", at(("failure_domains", 1, "power_feed"), "pdu-{% raw %}a")),
    ("cluster spec", "{# in a zone", at(("failure_domains", 0, "zone"), "z{# a comment #}")),
    ("cluster spec", "{{ in a GPU model", at(("pools", 0, "gpu_model"), "H100 {{ 7*7 }}")),
]
