#!/usr/bin/env python3
"""Writes each role's input table into its README from meta/argument_specs.yml, the one place inputs are
described. `--check` exits 1 naming the READMEs that are out of date (a unit test runs it)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parent.parent / "roles"
BEGIN = "<!-- inputs:begin (generated from meta/argument_specs.yml by scripts/role_docs.py) -->"
END = "<!-- inputs:end -->"


def _cell(value: object) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def _default(spec: dict) -> str:
    if "default" not in spec:
        return "required" if spec.get("required") else ""
    value = spec["default"]
    if isinstance(value, str):
        return f"`{_cell(value)}`" if value else '`""`'
    return f"`{_cell(yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip())}`"


def _rows(options: dict, prefix: str = "") -> list[str]:
    rows = []
    for name, spec in options.items():
        kind = spec.get("type", "str") + (f" of {spec['elements']}" if spec.get("elements") else "")
        description = " ".join(spec.get("description", "")) if isinstance(spec.get("description"), list) else \
            spec.get("description", "")
        if spec.get("choices"):
            description += f" One of: {', '.join(str(c) for c in spec['choices'])}."
        rows.append(f"| `{prefix}{name}` | {kind} | {_default(spec)} | {_cell(description)} |")
        if spec.get("options"):
            rows += _rows(spec["options"], prefix=f"{prefix}{name}[].")
    return rows


def table(role: Path) -> str:
    specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    parts = []
    for entry, spec in specs.items():
        if entry != "main" and spec.get("options") == specs.get("main", {}).get("options"):
            parts.append(f"Entry point `{entry}` ({spec.get('short_description', '')}) takes the same inputs.")
            continue
        title = "" if entry == "main" else f"Entry point `{entry}`: {spec.get('short_description', '')}\n\n"
        parts.append(title + "| input | type | default | description |\n|---|---|---|---|\n"
                     + "\n".join(_rows(spec.get("options", {}))))
    return "\n\n".join(parts)


def render(readme: str, role: Path) -> str:
    if BEGIN not in readme or END not in readme:
        return readme + f"\n## Inputs\n\n{BEGIN}\n{table(role)}\n{END}\n"
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(role)}\n{END}{tail}"


def main(check: bool) -> int:
    stale = []
    for role in sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists()):
        path = role / "README.md"
        current = path.read_text() if path.exists() else ""
        wanted = render(current, role)
        if wanted != current:
            stale.append(str(path))
            if not check:
                path.write_text(wanted)
    if check and stale:
        print("out of date (run scripts/role_docs.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main("--check" in sys.argv[1:]))
