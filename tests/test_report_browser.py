"""The report in a real browser: Chromium headless opens index.html from the file system, with no
network; the page must log no console error and every image must load (naturalWidth > 0).

Debian's chromium is installed when absent (as .ci/run does); the test skips, saying why, only
where it cannot be installed. A screenshot is kept under the test's tmp dir.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

from bench.report.html import build_report
from tests import report_fixtures as fx

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
         "--disable-component-update", "--disable-sync", "--disable-extensions", "--mute-audio"]

# Injected into a copy of the page only (the report itself has no script): records errors from the
# first moment, then on load writes the image check into the DOM, which --dump-dom prints.
PROBE = """<script>
window.__errors = [];
window.addEventListener('error', function (e) {
  window.__errors.push(e.message || ('failed to load ' + (e.target && (e.target.src || e.target.href))));
}, true);
var __ce = console.error;
console.error = function () { window.__errors.push(Array.prototype.join.call(arguments, ' ')); __ce.apply(console, arguments); };
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var bad = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); }).map(function (i) { return i.getAttribute('src'); });
  var out = document.createElement('pre');
  out.id = 'probe-result';
  var heads = imgs.filter(function (i) { return (i.getAttribute('src') || '').indexOf('headline_') === 0; });
  out.textContent = JSON.stringify({images: imgs.length, bad: bad, errors: window.__errors,
                                    widths: imgs.map(function (i) { return i.naturalWidth; }),
                                    viewport: [window.innerWidth, window.innerHeight],
                                    headlines: heads.map(function (i) { var r = i.getBoundingClientRect();
                                      return [i.getAttribute('src'), Math.round(r.top), Math.round(r.bottom)]; })});
  document.body.appendChild(out);
});
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    if os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, timeout=600)
        if shutil.which("chromium"):
            return shutil.which("chromium")
        why = "apt-get install -y chromium failed (no network or no package index?)"
    else:
        why = "not root or no apt-get, so Debian's chromium cannot be installed here"
    pytest.skip(f"no Chromium on PATH and {why}")


def _run(browser, args, tmp_path, name):
    profile = tmp_path / f"profile-{name}"
    cmd = [browser, *FLAGS, f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def _console_errors(stderr: str) -> list[str]:
    """Console messages of the page (Chromium logs each as '...:CONSOLE:<line>] "text", source: ...',
    console.error included, at INFO level), and resources that failed to load. The report has no
    script, so any console message is the browser complaining about the page. dbus / GPU noise of a
    headless container is not console output and is ignored."""
    return [line for line in stderr.splitlines()
            if re.search(r":CONSOLE(\(\d+\)|:\d+)\]", line) or re.search(r"net::ERR_(FILE_NOT_FOUND|ACCESS_DENIED)", line)]


@pytest.mark.slow
def test_report_in_chromium(tmp_path):
    browser = _chromium()
    root = tmp_path / "results"
    dirs = [fx.collectives_run(root, command=f"__main__.py collectives {fx.HOSTILE}"), fx.allreduce_run(root),
            fx.pipeline_run(root), fx.strategies_run(root)]
    index = build_report(dirs, tmp_path / "report")
    html = index.read_text(encoding="utf-8")
    probe = index.parent / "probe.html"  # beside index.html, so relative image paths resolve the same way
    probe.write_text(html.replace("<head>", "<head>\n" + PROBE, 1), encoding="utf-8")

    res = _run(browser, ["--window-size=1400,900", "--virtual-time-budget=15000", "--dump-dom", probe.as_uri()],
               tmp_path, "probe")
    m = re.search(r'<pre id="probe-result">(.*?)</pre>', res.stdout, re.S)
    assert m, f"the page never finished loading in Chromium (rc {res.returncode}): {res.stderr[-2000:]}"
    result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    n_png = len(list(index.parent.glob("*.png")))
    assert result["images"] == n_png > 10
    assert result["bad"] == [], f"images that did not load: {result['bad']}"
    assert all(w > 0 for w in result["widths"])
    assert result["errors"] == [], f"page errors: {result['errors']}"
    assert [e for e in _console_errors(res.stderr) if "probe-result" not in e] == []
    assert "alert(" not in "".join(result["errors"])  # the hostile command line never ran
    # the first screen (1400 px wide) answers: one headline plot per kind, wholly in view
    width, height = result["viewport"]
    heads = result["headlines"]
    assert sorted(h[0] for h in heads) == ["headline_allreduce_busbw.png", "headline_collectives_busbw.png",
                                           "headline_pipeline_throughput.png", "headline_strategies_throughput.png"]
    assert width >= 1300 and all(0 <= top and bottom <= height for _, top, bottom in heads), (result["viewport"], heads)

    # the page as shipped (no probe): no console error either, and a screenshot to keep
    shot = tmp_path / "report-screenshot.png"
    res = _run(browser, ["--window-size=1280,4000", "--virtual-time-budget=15000", f"--screenshot={shot}",
                         index.as_uri()], tmp_path, "shot")
    assert shot.exists() and shot.stat().st_size > 10_000, res.stderr[-2000:]
    assert _console_errors(res.stderr) == []
    probe.unlink()  # the report directory holds only the report
