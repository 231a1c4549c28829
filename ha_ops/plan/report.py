"""The HTML report of `ha-ops plan simulate --report DIR`: one self-contained `index.html`.

The page holds the run's parameters and the timing (with its source) of each kind of failure, a table of
interruptions, ETTR and goodput with their 95% confidence intervals per scenario, the goodput difference when there
is one, and three plots inlined as SVG: goodput over the replications, lost GPU-hours by cause and by part. Nothing
is fetched: no external CSS, scripts or fonts (the plots' text is drawn as paths). Every text put into the page is
escaped.

matplotlib (the `plan` extra) is imported inside the functions that draw, never at import of this module, and only
its object-oriented API is used (`matplotlib.figure.Figure`, no pyplot): no interactive backend, no global figure
state.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ha_ops
from ha_ops.plan.durations import format_duration
from ha_ops.plan.simulate import PARTS, Estimate, SimResult, scenario_dict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

INDEX = "index.html"
GENERATOR = "ha-ops plan simulate"  # the <meta name="generator"> that marks a folder's earlier report
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
KINDS = ("gpu", "host", "network", "software")
MAX_DOTS = 1000  # replications drawn as dots per scenario, a sample beyond that

_STYLE = {
    "svg.fonttype": "path",  # glyphs as paths: the page needs no font
    "svg.hashsalt": "ha-ops",  # stable ids, so the same run gives the same page (but its date)
    "font.size": 10.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


class ReportDirError(ValueError):
    """The report's folder cannot be used: not a folder, or a non-empty one that holds no earlier report."""


def check_directory(directory: Path) -> str | None:
    """Why `directory` must not receive a report, or None: missing, empty, or holding an earlier report."""
    if not directory.exists():
        return None
    if not directory.is_dir():
        return f"{directory} exists and is not a folder"
    if not any(directory.iterdir()):
        return None
    index = directory / INDEX
    if index.is_file() and _is_report(index):
        return None
    return f"{directory} is not empty and holds no earlier report ({INDEX}): refused, so as not to overwrite it"


def _is_report(path: Path) -> bool:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return f'<meta name="generator" content="{GENERATOR}' in head


def write_report(
    directory: Path, results: list[tuple[str, SimResult]], difference: Estimate | None, meta: Mapping[str, Any]
) -> Path:
    """Write `directory/index.html` (the folder made if missing) and return its path.

    `results` are (name, result) per scenario, the first being the one studied; `difference` is the first's goodput
    minus the second's, per replication (simulate.compare); `meta` is shown as given (the source, seed, command).
    A ReportDirError if the folder is a user's (check_directory)."""
    if not results:
        raise ValueError("no results to report")
    problem = check_directory(directory)
    if problem:
        raise ReportDirError(problem)
    page = render_html(results, difference, meta)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / INDEX
    tmp = directory / f".{INDEX}.tmp"
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, path)  # a reader never sees half a page
    return path


# ---------------------------------------------------------------------------------------------------------------
# The page


def render_html(results: Sequence[tuple[str, SimResult]], difference: Estimate | None, meta: Mapping[str, Any]) -> str:
    names = [name for name, _ in results]
    date = datetime.now(UTC).isoformat(timespec="seconds")
    plots = [_svg(fig, i) for i, (_, fig) in enumerate(figures(results))]
    captions = (
        "Goodput per replication: each dot one run of the job (a sample of 1,000 beyond that), the box its "
        "quartiles and the whiskers 1.5 times the interquartile range, the black diamond the mean with its 95% "
        "confidence interval.",
        "Lost GPU-hours per run by cause (mean over the replications): the rework and the downtime each cause's "
        "failures brought.",
        "Lost GPU-hours per run by part: what the lost time went on, checkpoint writes included.",
    )
    title = f"Goodput simulation: {', '.join(names)}"
    body = [
        f"<h1>{escape(title)}</h1>",
        '<p class="meta">',
        f"Generated {escape(date)} by ha-ops {escape(ha_ops.__version__)}",
        "</p>",
        "<h2>The run</h2>",
        _meta_table(meta, results),
        "<h2>Parameters</h2>",
        _parameters_table(results),
        "<h2>Detection and recovery per kind of failure</h2>",
        _timing_table(results),
        "<h2>Results</h2>",
        _results_table(results),
    ]
    if difference is not None:
        body.append(_difference(results, difference))
    body.append("<h2>Plots</h2>")
    for svg, caption in zip(plots, captions, strict=True):
        body.append(f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>")
    body += [
        "<h2>Lost GPU-hours per run</h2>",
        _hours_table("cause", results, _by_cause_order(results), lambda r: r.lost_gpu_hours_by_cause),
        _hours_table("part", results, list(PARTS), lambda r: r.lost_gpu_hours_by_part),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            f'<meta name="generator" content="{GENERATOR} (ha-ops {escape(ha_ops.__version__)})">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(title)}</title>",
            f"<style>{_CSS}</style>",
            "</head>",
            "<body>",
            *body,
            "</body>",
            "</html>",
            "",
        ]
    )


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
  max-width: 64em; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
p.meta { color: #555; } p.difference { font-size: 1.1em; }
figure { margin: 1.2em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { color: #555; font-size: 0.9em; }
""".strip()


def _pct(value: float) -> str:
    return f"{value * 100:.2f}%"


def _ci_pct(e: Estimate) -> str:
    return f"{e.low * 100:.2f}% to {e.high * 100:.2f}%"


def _num(text: str, cls: str = "") -> str:
    data = f' data-field="{escape(cls)}"' if cls else ""
    return f'<td class="num"{data}>{escape(text)}</td>'


def _meta_table(meta: Mapping[str, Any], results: Sequence[tuple[str, SimResult]]) -> str:
    rows = [("scenarios", ", ".join(name for name, _ in results)), ("replications", str(results[0][1].replications))]
    rows += [(str(k), _text(v)) for k, v in meta.items()]
    cells = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="run">{cells}</table>'


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "; ".join(_text(v) for v in value)
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_text(v)}" for k, v in value.items())
    return "" if value is None else str(value)


def _parameters_table(results: Sequence[tuple[str, SimResult]]) -> str:
    """One row per parameter; one cell for all scenarios where they agree, one per scenario where they differ."""
    dicts = [scenario_dict(r.scenario) for _, r in results]
    fields: list[tuple[str, Any]] = [
        ("GPUs", lambda d: f"{d['gpus']:,}"),
        ("GPUs per node", lambda d: str(d["gpus_per_node"])),
        ("nodes in the job", lambda d: f"{d['nodes']:,}"),
        ("spare nodes", lambda d: f"{d['spares']:,}"),
        ("wall-clock days", lambda d: f"{d['days']:g}"),
        ("the job's MTBF", lambda d: format_duration(d["mtbf_s"])),
        ("checkpoint interval (compute)", lambda d: format_duration(d["checkpoint_interval_s"])),
        ("checkpoint write (blocking)", lambda d: format_duration(d["checkpoint_cost_s"])),
        ("restart (relaunch, checkpoint load)", lambda d: format_duration(d["restart_s"])),
        ("GPU-hours of the job and its spares", lambda d: f"{_gpu_hours(d):,.0f}"),
    ]
    head = "".join(f"<th>{escape(name)}</th>" for name, _ in results)
    rows = [f"<tr><th>parameter</th>{head}</tr>"]
    for label, show in fields:
        values = [show(d) for d in dicts]
        if len(set(values)) == 1:
            cells = f'<td class="num" colspan="{len(values)}">{escape(values[0])}</td>'
        else:
            cells = "".join(_num(v) for v in values)
        rows.append(f"<tr><th>{escape(label)}</th>{cells}</tr>")
    return f'<table class="parameters">{"".join(rows)}</table>'


def _gpu_hours(d: Mapping[str, Any]) -> float:
    return float((d["gpus"] + d["spares"] * d["gpus_per_node"]) * d["days"] * 24)


def _timing_table(results: Sequence[tuple[str, SimResult]]) -> str:
    head = "".join(f"<th>{escape(name)}</th>" for name, _ in results)
    rows = [f"<tr><th>kind</th>{head}</tr>"]
    kinds = [k for k in KINDS if any(k in r.scenario.timing for _, r in results)]
    kinds += sorted({k for _, r in results for k in r.scenario.timing} - set(kinds))
    for kind in kinds:
        cells = []
        for _, r in results:
            t = r.scenario.timing.get(kind)  # type: ignore[call-overload]
            if t is None:
                cells.append("<td>-</td>")
                continue
            lo, hi = t.detect_min_s, t.detect_max_s
            detect = f"{lo:.3g} s" if lo == hi else f"{lo:.3g}-{hi:.3g} s"
            text = f"detect {detect}, then recover {t.recover_s:.3g} s"
            cells.append(f"<td>{escape(text)}<br><small>{escape(t.source or 'no source given')}</small></td>")
        rows.append(f"<tr><th>{escape(kind)}</th>{''.join(cells)}</tr>")
    return f'<table class="timing">{"".join(rows)}</table>'


def _results_table(results: Sequence[tuple[str, SimResult]]) -> str:
    head = (
        "<tr><th>scenario</th><th>interruptions</th><th>95% CI</th><th>ETTR</th><th>95% CI</th>"
        "<th>goodput (spares counted)</th><th>95% CI</th><th>goodput 5-95%</th></tr>"
    )
    rows = [head]
    for name, r in results:
        i, e, g = r.interruptions, r.ettr, r.goodput
        rows.append(
            f'<tr data-scenario="{escape(name)}"><th>{escape(name)}</th>'
            + _num(f"{i.mean:.1f}", "interruptions")
            + _num(f"{i.low:.1f} to {i.high:.1f}", "interruptions_ci")
            + _num(_pct(e.mean), "ettr")
            + _num(_ci_pct(e), "ettr_ci")
            + _num(_pct(g.mean), "goodput")
            + _num(_ci_pct(g), "goodput_ci")
            + _num(f"{g.p5 * 100:.2f}% to {g.p95 * 100:.2f}%", "goodput_spread")
            + "</tr>"
        )
    return f'<table class="results">{"".join(rows)}</table>'


def _difference(results: Sequence[tuple[str, SimResult]], d: Estimate) -> str:
    first = results[0][0]
    other = results[1][0] if len(results) > 1 else "the baseline"
    hours = d.mean * _gpu_hours(scenario_dict(results[0][1].scenario))
    text = (
        f"Goodput of {first} minus {other}, per replication (the same failures): {d.mean * 100:+.2f} points "
        f"(95% CI {d.low * 100:+.2f} to {d.high * 100:+.2f}), {hours:+,.0f} GPU-hours per run."
    )
    return f'<p class="difference" data-field="difference">{escape(text)}</p>'


def _by_cause_order(results: Sequence[tuple[str, SimResult]]) -> list[str]:
    """The causes, the most costly first (the largest loss in any scenario)."""
    most: dict[str, float] = {}
    for _, r in results:
        for cause, hours in r.lost_gpu_hours_by_cause.items():
            most[cause] = max(most.get(cause, 0.0), hours)
    return sorted(most, key=lambda c: -most[c])


def _hours_table(what: str, results: Sequence[tuple[str, SimResult]], keys: list[str], of: Any) -> str:
    head = "".join(f"<th>{escape(name)}</th>" for name, _ in results)
    rows = [f"<tr><th>{escape(what)}</th>{head}</tr>"]
    for key in keys:
        cells = "".join(_num(f"{of(r).get(key, 0.0):,.0f}") for _, r in results)
        rows.append(f"<tr><th>{escape(key)}</th>{cells}</tr>")
    totals = "".join(_num(f"{sum(of(r).values()):,.0f}") for _, r in results)
    rows.append(f"<tr><th>total</th>{totals}</tr>")
    return f'<table class="hours-by-{escape(what)}">{"".join(rows)}</table>'


# ---------------------------------------------------------------------------------------------------------------
# The plots


def figures(results: Sequence[tuple[str, SimResult]]) -> list[tuple[str, Figure]]:
    """The report's three figures, (name, matplotlib Figure): goodput, lost by cause, lost by part."""
    import matplotlib

    with matplotlib.rc_context(_STYLE):
        return [
            ("goodput", _goodput_figure(results)),
            ("lost-by-cause", _bars_figure(results, _by_cause_order(results), "cause")),
            ("lost-by-part", _bars_figure(results, list(PARTS), "part")),
        ]


def _goodput_figure(results: Sequence[tuple[str, SimResult]]) -> Figure:
    import numpy as np
    from matplotlib.figure import Figure

    n = len(results)
    fig = Figure(figsize=(8.0, 1.4 + 0.9 * n), layout="constrained")
    ax = fig.add_subplot()
    data = [np.asarray(r.per_replication_goodput) * 100 for _, r in results]
    positions = list(range(n, 0, -1))  # the first scenario on top
    # `orientation` came in matplotlib 3.10, which deprecates `vert`.
    horizontal = {"orientation": "horizontal"} if _version() >= (3, 10) else {"vert": False}
    ax.boxplot(data, positions=positions, widths=0.5, showfliers=False, medianprops={"color": "#444"}, **horizontal)
    rng = np.random.default_rng(0)  # the jitter only: the same page for the same results
    for k, (values, y) in enumerate(zip(data, positions, strict=True)):
        if len(values) > MAX_DOTS:  # the box has them all; the page stays small
            values = rng.choice(values, size=MAX_DOTS, replace=False)
        jitter = rng.uniform(-0.18, 0.18, size=len(values))
        ax.scatter(values, y + jitter, s=9, alpha=0.45, color=COLORS[k % len(COLORS)], linewidths=0, zorder=3)
        g = results[k][1].goodput
        ax.errorbar(
            [g.mean * 100],
            [y],
            xerr=[[(g.mean - g.low) * 100], [(g.high - g.mean) * 100]],
            fmt="D",
            color="black",
            markersize=4,
            capsize=4,
            zorder=4,
        )
    ax.set_yticks(positions, [_short(name) for name, _ in results])
    ax.set_ylim(0.4, n + 0.6)
    ax.set_xlabel("goodput per replication (% of the job's and spares' GPU-hours)")
    reps = results[0][1].replications
    ax.set_title(f"Goodput over {reps:,} replications", loc="left")
    ax.grid(axis="x", color="#ddd", linewidth=0.8)
    ax.set_axisbelow(True)
    return fig


def _bars_figure(results: Sequence[tuple[str, SimResult]], keys: list[str], what: str) -> Figure:
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    n = len(results)
    group = 0.8
    height = group / n
    fig = Figure(figsize=(8.0, 1.3 + len(keys) * (0.18 + 0.16 * n)), layout="constrained")
    ax = fig.add_subplot()
    base = np.arange(len(keys))
    for k, (name, r) in enumerate(results):
        values = r.lost_gpu_hours_by_cause if what == "cause" else r.lost_gpu_hours_by_part
        hours = [values.get(key, 0.0) for key in keys]
        offset = -group / 2 + height * (k + 0.5)
        ax.barh(base + offset, hours, height=height * 0.92, color=COLORS[k % len(COLORS)], label=_short(name))
    ax.set_yticks(base, keys)
    ax.invert_yaxis()  # the largest (or the first part) on top
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
    ax.set_xlabel("lost GPU-hours per run (mean over the replications)")
    ax.set_title(f"Lost GPU-hours by {what}", loc="left")
    ax.grid(axis="x", color="#ddd", linewidth=0.8)
    ax.set_axisbelow(True)
    if n > 1:  # below the axes: never over a bar
        fig.legend(loc="outside lower center", ncols=n, frameon=False)
    return fig


def _version() -> tuple[int, ...]:
    import matplotlib

    return tuple(int(p) for p in re.findall(r"\d+", matplotlib.__version__)[:2])


def _short(name: str, width: int = 28) -> str:
    """A scenario's name as a label: cut to `width`, its dollar signs kept literal (not mathtext)."""
    name = name if len(name) <= width else name[: width - 1] + "…"
    return name.replace("$", r"\$")


_ID = re.compile(r'\bid="([^"]+)"')


def _svg(fig: Figure, index: int) -> str:
    """The figure as an inline <svg> element: no XML prolog, no metadata, its ids made unique within the page."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(_STYLE):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)  # RDF about matplotlib
    prefix = f"f{index}-"
    ids = set(_ID.findall(text))
    text = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', text)
    # References: url(#id) in styles and attributes, href="#id" on <use>.
    text = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}{m.group(1)})" if m.group(1) in ids else m[0], text)
    text = re.sub(
        r'(href)="#([^"]+)"', lambda m: f'{m.group(1)}="#{prefix}{m.group(2)}"' if m.group(2) in ids else m[0], text
    )
    return text.replace("<svg ", '<svg role="img" ', 1).strip()


__all__ = ["INDEX", "ReportDirError", "check_directory", "figures", "render_html", "write_report"]
