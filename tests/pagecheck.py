"""Pages as a person sees them: rendered by headless Chromium (Debian's, which `make setup` installs), screenshotted,
and their SVG text boxes measured as laid out, so a test can assert that no label overlaps another or is clipped."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")

# Run in the page: every SVG's box and each of its texts' boxes, as laid out, written into the DOM for --dump-dom.
PROBE = """<script>
const found = [...document.querySelectorAll('svg')].map(s => {
  const r = s.getBoundingClientRect();
  return {cls: s.getAttribute('class'), box: [r.left, r.top, r.right, r.bottom],
          texts: [...s.querySelectorAll('text')].map(t => {
            const b = t.getBoundingClientRect();
            return {text: t.textContent, box: [b.left, b.top, b.right, b.bottom]};
          })};
});
const out = document.createElement('pre');
out.id = 'probe';
out.textContent = JSON.stringify(found);
document.body.appendChild(out);
</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with a throwaway profile, and nothing that would reach out of the machine."""
    profile = tempfile.mkdtemp(prefix="hao-chromium-")
    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", *args]  # fmt: skip
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-2000:]
    return run


def screenshot(page: Path, shot: Path, height: int = 3000) -> Path:
    shot.parent.mkdir(parents=True, exist_ok=True)
    chromium(f"--window-size=1280,{height}", f"--screenshot={shot}", page.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    return shot


def rendered_svgs(page: Path) -> list[dict[str, Any]]:
    """Each SVG of the page as rendered: {cls, box, texts: [{text, box}]}, boxes as [left, top, right, bottom]."""
    probe = page.with_name(f".probe-{page.name}")  # beside it: its relative links still resolve
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    try:
        dom = chromium("--window-size=1280,2000", "--dump-dom", probe.as_uri()).stdout
    finally:
        probe.unlink()
    found = re.search(r"<pre id=\"probe\">(.*?)</pre>", dom, re.S)
    assert found, dom[-2000:]
    return json.loads(html.unescape(found.group(1)))


def overlap(a: list[float], b: list[float]) -> float:
    """The area two boxes share (px²)."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def assert_text_apart(page: Path) -> list[dict[str, Any]]:
    """No two texts of one SVG overlap, and none reaches outside its SVG (clipped); the SVGs are returned."""
    svgs = rendered_svgs(page)
    for s in svgs:
        texts = s["texts"]
        for i, a in enumerate(texts):
            assert a["box"][2] > a["box"][0], a  # rendered, with a width
            left, top, right, bottom = s["box"]
            inside = (a["box"][0] >= left - 0.5 and a["box"][2] <= right + 0.5
                      and a["box"][1] >= top - 0.5 and a["box"][3] <= bottom + 0.5)  # fmt: skip
            assert inside, f"{a['text']!r} clipped by its {s['cls']}: {a['box']} outside {s['box']}"
            for b in texts[i + 1 :]:
                assert overlap(a["box"], b["box"]) < 0.5, f"{a['text']!r} overlaps {b['text']!r} in a {s['cls']}"
    return svgs
