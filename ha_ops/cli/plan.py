"""`ha-ops plan`: the checkpoint interval, the spares and a training job's goodput under failures, from ha_ops.plan
(pure functions: this module parses the options, calls them and renders)."""

from __future__ import annotations

import math
import shlex
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ha_ops.cli import output
from ha_ops.errors import SpecError
from ha_ops.plan.checkpoint import plan_checkpoints
from ha_ops.plan.durations import format_duration, parse_duration
from ha_ops.plan.ettr import ettr_kokolis
from ha_ops.plan.failures import DAY, FLEETS, Fleet, mtbf_s
from ha_ops.plan.presets import PRESETS, Preset
from ha_ops.plan.spares import RULE_HIGH, RULE_LOW, plan_spares

app = typer.Typer(help="Plan for failures: checkpoint interval, spares, goodput simulation.", no_args_is_help=True)

BASELINE = "nhc-5min"  # what a game day's measured times are compared with


def _fleet(name: str) -> Fleet:
    if name not in FLEETS:
        raise SpecError("--fleet", [f"{name!r} is not one of {', '.join(FLEETS)}"])
    return FLEETS[name]


def _per_1000(fleet: Fleet) -> str:
    return f"{fleet.failures_per_node_day * 1000:.2f} failures per 1,000 node-days of {fleet.gpus_per_node} GPUs"


def _positive(value: float, flag: str, what: str = "above zero") -> None:
    if not (math.isfinite(value) and value > 0):
        raise SpecError(flag, [f"{value:g} must be {what}"])


@app.command()
def checkpoint(
    mtbf: str | None = typer.Option(None, "--mtbf", help="The job's MTBF: 3.1h, 45m, 2d."),
    cost: str = typer.Option(..., "--cost", help="A checkpoint's blocking write: 30s."),
    nodes: int | None = typer.Option(None, "--nodes", help="Instead of --mtbf: the job's nodes."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node"),
    fleet_name: str = typer.Option("llama3", "--fleet", help=f"Failure rate for --nodes: {', '.join(FLEETS)}."),
    restart: str = typer.Option("3m", "--restart", help="Failure to training again, for the ETTR shown."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """The checkpoint interval by Young (1974) and Daly (2006, eq. 37).

    From the MTBF and the checkpoint cost, with the ETTR each interval gives (Kokolis et al. 2025). The MTBF is
    --mtbf, or comes from --nodes x --gpus-per-node and a fleet's failure rate."""
    if (mtbf is None) == (nodes is None):
        raise SpecError("--mtbf", ["give either --mtbf or --nodes (with --gpus-per-node)"])
    cost_s = parse_duration(cost, "--cost")
    restart_s = parse_duration(restart, "--restart", allow_zero=True)
    if mtbf is not None:
        mtbf_seconds, source = parse_duration(mtbf, "--mtbf"), "given"
    else:
        assert nodes is not None
        _positive(nodes, "--nodes")
        _positive(gpus_per_node, "--gpus-per-node")
        fleet = _fleet(fleet_name)
        mtbf_seconds = mtbf_s(nodes * gpus_per_node, fleet)
        source = f"{nodes} nodes x {gpus_per_node} GPUs, fleet {fleet.name}: {_per_1000(fleet)}"
    if cost_s > mtbf_seconds:
        raise SpecError("--cost", [f"{cost} is above the MTBF ({format_duration(mtbf_seconds)}): no interval helps"])
    plan = plan_checkpoints(mtbf_seconds, cost_s)
    rate = 1.0 / mtbf_seconds  # the whole job's failure rate: N_nodes * r_f in Kokolis et al.'s form
    rows = {}
    for name, interval in (("young", plan.young_s), ("daly", plan.daly_s)):
        rows[name] = {
            "interval_s": round(interval, 3),
            "interval_min": round(interval / 60, 2),
            "ettr": round(ettr_kokolis(1, rate, restart_s, interval, cost_s), 5),
        }
    if json_out:
        output.emit_json({"mtbf_s": round(mtbf_seconds, 3), "mtbf_h": round(mtbf_seconds / 3600, 3),
                          "mtbf_from": source, "cost_s": cost_s, "restart_s": restart_s, **rows})  # fmt: skip
        return
    output.result(f"MTBF {format_duration(mtbf_seconds)} ({source}), checkpoint cost {format_duration(cost_s)}")
    output.result(f"Young (1974):         every {rows['young']['interval_min']:.1f} min")
    output.result(f"Daly (2006, eq. 37):  every {rows['daly']['interval_min']:.1f} min  (use this one)")
    output.result(
        f"ETTR (Kokolis et al. 2025) with a {format_duration(restart_s)} restart: "
        f"{rows['daly']['ettr']:.1%} at Daly's interval, {rows['young']['ettr']:.1%} at Young's"
    )


@app.command()
def spares(
    nodes: int = typer.Option(..., "--nodes", help="Nodes the pool must keep in use."),
    repair: str = typer.Option(..., "--repair", help="Mean repair time of a failed node: 48h."),
    target: float = typer.Option(0.99, "--target", help="Probability of full capacity to reach."),
    rate: float | None = typer.Option(None, "--rate", help="Failures per 1,000 node-days (instead of --fleet)."),
    fleet_name: str = typer.Option("llama3", "--fleet", help=f"Failure rate: {', '.join(FLEETS)}."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="Scales the fleet's rate (per GPU)."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """The spares that keep a pool at full capacity through repairs, against the 15-20% rule.

    The fewest spares that keep --nodes in use with probability --target (a binomial model of the nodes in repair
    at once), next to the design's rule of 15-20% spares."""
    _positive(nodes, "--nodes")
    repair_s = parse_duration(repair, "--repair")
    if not 0.0 < target < 1.0:
        raise SpecError("--target", [f"{target:g} must be a probability between 0 and 1 (0.99)"])
    if rate is not None:
        _positive(rate, "--rate")
        per_node_s, source = rate / 1000 / DAY, "--rate"
    else:
        _positive(gpus_per_node, "--gpus-per-node")
        fleet = _fleet(fleet_name)
        per_node_s, source = fleet.per_gpu_s * gpus_per_node, f"fleet {fleet.name}, {gpus_per_node} GPUs a node"
    try:
        plan = plan_spares(nodes, per_node_s, repair_s, target)
    except ValueError as exc:
        raise SpecError("--repair", [str(exc)]) from None
    data = {
        "nodes": nodes,
        "failures_per_1000_node_days": round(per_node_s * DAY * 1000, 4),
        "rate_from": source,
        "repair_s": repair_s,
        "target": target,
        "spares": plan.spares,
        "spares_fraction": round(plan.fraction, 4),
        "probability": round(plan.probability, 6),
        "mean_in_repair": round(plan.mean_in_repair, 3),
        "rule": {
            "fraction": [RULE_LOW, RULE_HIGH],
            "spares": [plan.rule_low, plan.rule_high],
            "probability_at_low": round(plan.rule_low_probability, 6),
            "extra_over_model": plan.rule_low - plan.spares,
        },
    }
    if json_out:
        output.emit_json(data)
        return
    output.result(
        f"{nodes} nodes, {data['failures_per_1000_node_days']:.2f} failures per 1,000 node-days each ({source}), "
        f"repaired in {format_duration(repair_s)}: {plan.mean_in_repair:.2f} nodes in repair on average"
    )
    output.result(
        f"spares for full capacity with probability >= {target:g}: {plan.spares} ({plan.fraction:.1%} of the "
        f"pool), which gives {plan.probability:.4f}"
    )
    diff = plan.rule_low - plan.spares
    verdict = f"{diff} more than the model needs" if diff > 0 else f"{-diff} fewer than the model needs"
    output.result(
        f"the 15-20% rule: {plan.rule_low}-{plan.rule_high} spares ({plan.rule_low_probability:.4f} with "
        f"{plan.rule_low}): {verdict if diff else 'as many as the model needs'}"
    )


def _scenario_values(preset: Preset, **given: Any) -> dict[str, Any]:
    return {k: (getattr(preset, k) if v is None else v) for k, v in given.items()}


@app.command()
def simulate(
    from_gameday: Path | None = typer.Option(
        None, "--from-gameday", help="A game day's JSON report: its measured times.", dir_okay=False
    ),
    preset_name: str | None = typer.Option(None, "--preset", help=f"One of {', '.join(PRESETS)} (llama3-16k)."),
    gpus: int | None = typer.Option(None, "--gpus", help="The job's GPUs (the preset's: 16,384)."),
    days: float | None = typer.Option(None, "--days", help="Wall-clock days (the preset's: 54)."),
    replications: int = typer.Option(200, "--replications", help="Runs of the job to average."),
    interval: str | None = typer.Option(None, "--checkpoint-interval", help="Compute between checkpoints (Daly's)."),
    cost: str | None = typer.Option(None, "--checkpoint-cost", help="A checkpoint's blocking write (30s)."),
    restart: str | None = typer.Option(None, "--restart", help="Relaunch and checkpoint load (3m)."),
    spare_nodes: int | None = typer.Option(None, "--spares", help="Spare nodes (1 in 32 of the job's, rounded up)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node"),
    fleet_name: str | None = typer.Option(None, "--fleet", help=f"Failure rate: {', '.join(FLEETS)} (llama3)."),
    seed: int = typer.Option(0, "--seed", help="The random generator's seed: same seed, same failures."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
    report: Path | None = typer.Option(None, "--report", help="Also an HTML report in this folder.", file_okay=False),
) -> None:
    """A training job's goodput under failures: a discrete-event simulation.

    The job runs on --gpus GPUs for --days days under the Llama 3 failure mix (arXiv 2407.21783, Table 5):
    interruptions, ETTR and goodput with 95% confidence intervals over the replications, and the GPU-hours each
    cause lost. Detection and recovery times come from a preset, or from a game day's report; with
    --from-gameday the same cluster also runs under the nhc-5min preset, with the same failures, and the goodput
    difference is shown. --report DIR also writes DIR/index.html: the results' tables and plots, self-contained."""
    try:  # (the `plan` extra: the agent and controller installed on the nodes need no numpy)
        import numpy as np
    except ImportError:
        raise SpecError("plan simulate", ["needs numpy: pip install 'ha-ops[plan]'"]) from None
    if report is not None:  # refused before the simulation runs, not after
        _check_report(report)

    from ha_ops.plan.checkpoint import daly_interval
    from ha_ops.plan.failures import failure_mix
    from ha_ops.plan.gameday_input import read_gameday
    from ha_ops.plan.simulate import Scenario, compare, mean_mtbf_s, result_dict
    from ha_ops.plan.simulate import simulate as run

    if from_gameday is not None and preset_name is not None:
        raise SpecError("--preset", ["give --preset or --from-gameday, not both"])
    name = preset_name or "llama3-16k"
    if name not in PRESETS:
        raise SpecError("--preset", [f"{name!r} is not one of {', '.join(PRESETS)}"])
    preset = PRESETS[name]
    if not 1 <= replications <= 100_000:
        raise SpecError("--replications", [f"{replications} must be 1-100000"])
    v = _scenario_values(preset, gpus=gpus, days=days, gpus_per_node=gpus_per_node, fleet=fleet_name)
    _positive(v["gpus"], "--gpus")
    _positive(v["days"], "--days")
    _positive(v["gpus_per_node"], "--gpus-per-node")
    v["spares"] = preset.spares_for(v["gpus"], v["gpus_per_node"]) if spare_nodes is None else spare_nodes
    if v["spares"] < 0:
        raise SpecError("--spares", [f"{v['spares']} must be zero or more"])
    mix = failure_mix(_fleet(v["fleet"]))
    mtbf = mean_mtbf_s(mix, v["gpus"])
    cost_s = preset.checkpoint_cost_s if cost is None else parse_duration(cost, "--checkpoint-cost")
    if cost_s > mtbf:
        raise SpecError("--checkpoint-cost", [f"{format_duration(cost_s)} is above the MTBF "
                                              f"({format_duration(mtbf)})"])  # fmt: skip
    interval_s = daly_interval(mtbf, cost_s) if interval is None else parse_duration(interval, "--checkpoint-interval")
    restart_s = preset.restart_s if restart is None else parse_duration(restart, "--restart", allow_zero=True)
    gameday = read_gameday(from_gameday, PRESETS[BASELINE]) if from_gameday is not None else None
    timing = gameday.timing if gameday is not None else preset.timing

    def scenario(timing: Any) -> Scenario:
        return Scenario(gpus=v["gpus"], days=v["days"], checkpoint_interval_s=interval_s, checkpoint_cost_s=cost_s,
                        restart_s=restart_s, spares=v["spares"], timing=timing, mix=mix,
                        gpus_per_node=v["gpus_per_node"])  # fmt: skip

    result = run(scenario(timing), replications, np.random.default_rng(seed))
    data: dict[str, Any] = {"preset": None if gameday else name, "seed": seed, **result_dict(result)}
    data["scenario"]["checkpoint_interval_from"] = "Daly 2006, eq. 37" if interval is None else "given"
    runs, diff = [(name, result)], None
    if gameday is not None:
        baseline = run(scenario(PRESETS[BASELINE].timing), replications, np.random.default_rng(seed))
        diff = compare(result, baseline)
        gpu_hours = v["gpus"] * v["days"] * 24 + v["spares"] * v["gpus_per_node"] * v["days"] * 24
        data["gameday"] = {
            "name": gameday.gameday,
            "report": str(from_gameday),
            "measured_kinds": list(gameday.measured_kinds),
            "faults": [f.__dict__ for f in gameday.faults],
        }
        data["baseline"] = {"preset": BASELINE, **result_dict(baseline)}
        data["difference"] = {"goodput": diff.as_dict(), "gpu_hours": round(diff.mean * gpu_hours, 1)}
        runs = [(f"game day {gameday.gameday}", result), (BASELINE, baseline)]
    if report is not None:
        from ha_ops.plan.report import write_report

        path = write_report(report, runs, diff, _report_meta(data, preset, gameday, v["fleet"]))
        data["report"] = str(path)
    if json_out:
        output.emit_json(data)
        return
    _render(data, name, gameday is not None)
    if report is not None:
        output.result(f"report: {data['report']}")


def _check_report(directory: Path) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        # (the CLI prints errors as rich markup: "\\[" keeps the extra's brackets)
        raise SpecError("--report", ["needs matplotlib: pip install 'ha-ops[plan]'"]) from None
    from ha_ops.plan.report import check_directory

    problem = check_directory(directory)
    if problem:
        raise SpecError("--report", [problem])


def _report_meta(data: dict[str, Any], preset: Preset, gameday: Any, fleet: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if gameday is not None:
        g = data["gameday"]
        meta["source"] = f"game day {g['name']} ({g['report']}), the other kinds at {BASELINE}'s times"
        meta["measured kinds"] = ", ".join(g["measured_kinds"]) or "none"
        meta["not used"] = [f"{f['name']}: {f['why']}" for f in g["faults"] if not f["used"]] or "none"
    else:
        meta["source"] = f"preset {preset.name}: {preset.description}"
        if preset.notes:
            meta["notes"] = list(preset.notes)
    meta["failure rates"] = f"fleet {fleet}, Llama 3's mix of causes (arXiv 2407.21783, Table 5)"
    meta["checkpoint interval from"] = data["scenario"]["checkpoint_interval_from"]
    meta["seed"] = data["seed"]
    meta["command"] = shlex.join(["ha-ops", *sys.argv[1:]])
    return meta


def _pct(e: dict[str, float]) -> str:
    return f"{e['mean']:.2%} (95% CI {e['low']:.2%}-{e['high']:.2%}; 5-95%: {e['p5']:.2%}-{e['p95']:.2%})"


def _render(data: dict[str, Any], preset: str, from_gameday: bool) -> None:
    s = data["scenario"]
    where = f"game day {data['gameday']['name']}" if from_gameday else f"preset {preset}"
    output.result(
        f"{where}: {s['gpus']:,} GPUs ({s['nodes']:,} nodes + {s['spares']} spares) for {s['days']:g} days, "
        f"MTBF {format_duration(s['mtbf_s'])}; checkpoint every {format_duration(s['checkpoint_interval_s'])} "
        f"({s['checkpoint_interval_from']}), {format_duration(s['checkpoint_cost_s'])} each; restart "
        f"{format_duration(s['restart_s'])}; {data['replications']} replications, seed {data['seed']}"
    )
    i = data["interruptions"]
    output.result(f"interruptions  {i['mean']:.1f} (95% CI {i['low']:.1f}-{i['high']:.1f})")
    output.result(f"ETTR           {_pct(data['ettr'])}")
    output.result(f"goodput        {_pct(data['goodput'])}, spares counted")
    table = Table(title="lost GPU-hours per run (mean)")
    table.add_column("cause")
    table.add_column("GPU-hours", justify="right")
    for cause, hours in data["lost_gpu_hours_by_cause"].items():
        table.add_row(cause, f"{hours:,.0f}")
    table.add_section()
    for part, hours in data["lost_gpu_hours_by_part"].items():
        table.add_row(f"[dim]{part}[/]", f"[dim]{hours:,.0f}[/]")
    output.result(table)
    if from_gameday:
        g, b, d = data["gameday"], data["baseline"], data["difference"]
        for kind, t in s["timing"].items():
            mark = "measured" if kind in g["measured_kinds"] else "every preset's" if kind == "software" else BASELINE
            lo, hi = t["detect_min_s"], t["detect_max_s"]
            detect = f"{lo:.1f}" if lo == hi else f"{lo:.0f}-{hi:.0f}"
            output.result(f"  {kind:8} {mark}: detect {detect} s, then {t['recover_s']:.1f} s ({t['source']})")
        for f in g["faults"]:
            if not f["used"]:
                output.result(f"  not used: {f['name']}: {f['why']}")
        output.result(f"the same cluster under {BASELINE}: goodput {_pct(b['goodput'])}")
        e = d["goodput"]
        output.result(
            f"ha-ops' measured times vs {BASELINE}: goodput {e['mean'] * 100:+.2f} points "
            f"(95% CI {e['low'] * 100:+.2f} to {e['high'] * 100:+.2f}), {d['gpu_hours']:+,.0f} GPU-hours per run"
        )
