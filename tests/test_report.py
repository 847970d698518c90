"""distbench report / show / runs on small stored runs made here (no benchmark is run)."""

import io
import json
import struct
from contextlib import redirect_stdout
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from bench.cli import main
from bench.errors import BenchError
from bench.report.html import build_report
from bench.results import runs as runs_mod
from bench.results.store import load_run
from tests import report_fixtures as fx


class _Page(HTMLParser):
    """Sections (id + h2 text), images (src, alt), and all text, from the report page."""

    def __init__(self):
        super().__init__()
        self.sections, self.images, self.scripts, self.text, self._h2 = {}, [], 0, [], None
        self._section = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self._section = a.get("id")
            self.sections[self._section] = ""
        elif tag == "h2":
            self._h2 = self._section
        elif tag == "img":
            self.images.append(a)
        elif tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "h2":
            self._h2 = None

    def handle_data(self, data):
        self.text.append(data)
        if self._h2 is not None:
            self.sections[self._h2] += data.strip()


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _parse(index) -> _Page:
    p = _Page()
    p.feed(index.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    return {"root": root,
            "collectives": fx.collectives_run(root, command=f"__main__.py collectives --sizes 4K {fx.HOSTILE}"),
            "allreduce": fx.allreduce_run(root),
            "pipeline": fx.pipeline_run(root),
            "strategies": fx.strategies_run(root)}


@pytest.fixture(scope="module")
def full_report(stored, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    index = build_report([stored[k] for k in ("collectives", "allreduce", "pipeline", "strategies")], out)
    return index


def test_report_has_every_section_and_valid_images(full_report):
    page = _parse(full_report)
    assert set(page.sections) >= {"runs", "collectives", "allreduce", "pipeline", "strategies", "telemetry"}
    assert page.scripts == 0  # self-contained and inert: no script at all
    html = full_report.read_text()
    assert "http://" not in html and "https://" not in html  # nothing fetched from a network
    files = {img["src"] for img in page.images}
    for img in page.images:
        assert img.get("alt") and len(img["alt"]) > 30, f"{img['src']} has no useful alt text"
        w, h = _png_size(full_report.parent / img["src"])
        assert 300 <= w <= 4000 and 200 <= h <= 4000, f"{img['src']} is {w}x{h}"
    expected = {
        "collectives_all_reduce_busbw_vs_size.png", "collectives_broadcast_latency_vs_size_small.png",
        "allreduce_time_vs_size_w2_float32_sum_latency.png", "allreduce_busbw_vs_size_w4_float32_sum_latency.png",
        "allreduce_MODEL_OUTPUT_predicted_time_vs_world.png",
        "pipeline_throughput_vs_chunks.png", "pipeline_speedup_vs_chunks1.png", "pipeline_bubble_vs_chunks_gpipe.png",
        "pipeline_bubble_vs_chunks_1f1b.png", "pipeline_peak_memory_vs_chunks_by_checkpoint.png",
        "pipeline_microbatch_efficiency.png", "pipeline_gantt_pp.mlp-pipe.1f1b.m4.never.png",
        "strategies_throughput_by_strategy.png", "strategies_peak_memory_by_strategy.png",
    }
    assert expected <= files, sorted(expected - files)
    assert any(f.startswith("telemetry_host_timeline_") for f in files)
    # every PNG written is on the page, and nothing on the page is missing from disk
    assert files == {p.name for p in full_report.parent.glob("*.png")}


def test_header_metadata_flags_and_escaping(full_report):
    html = full_report.read_text()
    text = " ".join(_parse(full_report).text)
    assert "<script>alert" not in html  # the hostile command line is escaped, not markup
    assert "&lt;script&gt;alert(" in html
    assert "python -m bench collectives --sizes 4K <script>alert('x')</script>" in text  # shown as typed
    for fact in ("0123456789ab", "dirty", "2.13.0+cpu", "gloo", "node-a", "Test CPU 9000"):
        assert fact in text, fact
    assert "OVERSUBSCRIBED at world 4" in text
    assert "DEGRADED" in text and "DataParallel is a pass-through" in text
    assert "noisy rows (IQR/median > 0.1): 4 of 16 (25%)" in text
    assert "NVML: library not found" in text
    assert "MODEL OUTPUT" in text
    assert "Wrong elements" in text and "p25-p75 of the per-iteration time reduced over ranks" in text


def test_run_lacking_tables_renders_and_says_what_is_missing(tmp_path):
    run = fx.collectives_run(tmp_path / "r", with_samples=False, with_telemetry=False)
    pp = fx.pipeline_run(tmp_path / "r", with_spans=False)
    index = build_report([run, pp], tmp_path / "rep")
    page = _parse(index)
    text = " ".join(page.text)
    assert "no samples table" in text and "time_p25_s/time_p75_s" in text
    assert "no telemetry table" in text
    assert "no strategy_spans table" in text and "no Gantt chart" in text
    assert page.images and all((index.parent / i["src"]).exists() for i in page.images)


def test_baseline_overlay_and_gate_section(stored, tmp_path):
    base = fx.collectives_run(tmp_path / "b", run_id="20251201T000000Z-base01", scale=1.3)
    index = build_report([stored["collectives"]], tmp_path / "rep", baseline_dirs=[base])
    page = _parse(index)
    assert "gate" in page.sections
    text = " ".join(page.text)
    assert "Baseline: baseline collectives/20251201T000000Z-base01" in text
    try:
        import bench.regress.gate  # noqa: F401 - built separately; the report must work without it
    except ImportError:
        assert "bench.regress.gate" in text and "not installed" in text
    else:  # a verdict (a plain run dir is no recorded baseline: 'not-comparable', said so) or the gate's failure
        assert "collectives/20260101T000000Z-coll01 vs baseline" in text or "gate failed" in text


@pytest.mark.slow
def test_ten_runs_stay_one_png_per_plot(tmp_path):
    dirs = [fx.collectives_run(tmp_path / "r", run_id=f"20260101T0000{i:02d}Z-many{i:02d}", scale=1 + i / 10)
            for i in range(10)]
    index = build_report(dirs, tmp_path / "rep")
    names = {i["src"] for i in _parse(index).images}
    assert "collectives_all_reduce_busbw_vs_size.png" in names
    w, h = _png_size(index.parent / "collectives_all_reduce_busbw_vs_size.png")
    assert w < 2000 and h < 1500  # the legend went beside the axes, not over them


def _show(args) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["show", *args]) == 0
    return buf.getvalue()


def _same(a: pd.DataFrame, b: pd.DataFrame, empty_is_null: bool = False):
    """Same values, column by column; CSV has no null, so there an empty string and a null are one value."""
    assert list(a.columns) == list(b.columns)
    assert len(a) == len(b)
    for c in a.columns:
        x, y = a[c], b[c]
        if pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
            xa = pd.to_numeric(x, errors="coerce").astype("float64").to_numpy()
            ya = pd.to_numeric(y, errors="coerce").astype("float64").to_numpy()
            assert np.array_equal(xa, ya, equal_nan=True), c
        else:
            def norm(v):
                return None if pd.isna(v) or (empty_is_null and v == "") else str(v)

            assert [norm(v) for v in x] == [norm(v) for v in y], c


@pytest.mark.parametrize("table", ["results", "samples"])
def test_show_csv_and_json_round_trip(stored, table):
    run_dir = stored["collectives"]
    want = load_run(run_dir)[table]
    got_csv = pd.read_csv(io.StringIO(_show([str(run_dir), "--format", "csv", "--table", table])),
                          keep_default_na=False, na_values=[""])
    _same(want, got_csv, empty_is_null=True)
    got_json = pd.DataFrame(json.loads(_show([str(run_dir), "--format", "json", "--table", table])))
    _same(want, got_json)
    md = _show([str(run_dir), "--format", "markdown", "--table", table])
    assert md.count("\n") == len(want) + 2


def test_show_table_prints_case_ids(stored):
    out = _show([str(stored["collectives"])])
    assert "all_reduce.float32.sum.root0.latency.w2" in out
    assert "broadcast.float32.none.root0.latency.w2" in out


@pytest.mark.parametrize("args, words", [
    (["show", "/no/such/run"], ["/no/such/run", "does not exist"]),
    (["show", "{run}", "--table", "modle"], ["modle", "allowed:", "results"]),
    (["show", "{run}", "--format", "yaml"], ["yaml", "invalid choice"]),
    (["report", "/no/such/run"], ["/no/such/run", "does not exist"]),
    (["runs", "--kind", "colectives", "--out", "{root}"], ["colectives", "did you mean 'collectives'"]),
])
def test_bad_input_is_one_line(stored, capsys, args, words):
    args = [a.format(run=stored["collectives"], root=stored["root"]) for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("distbench: error:")
    for w in words:
        assert w in err, (w, err)


def test_runs_lists_kind_state_cases_rows(stored, tmp_path, capsys):
    fx.interrupted_run(stored["root"])
    assert main(["runs", "--out", str(stored["root"])]) == 0
    out = capsys.readouterr().out
    for kind in ("collectives", "allreduce", "pipeline", "strategies"):
        assert kind in out
    assert "interrupted" in out and "never finished" in out
    assert "complete" in out
    s = runs_mod.summarize(stored["allreduce"])
    assert (s["kind"], s["state"], s["rows"], s["cases_planned"]) == ("allreduce", "complete", 20, 4)
    assert runs_mod.summarize(stored["strategies"])["kind"] == "strategies"  # from the rows' 'strategy'
    assert main(["runs", "--out", str(stored["root"]), "--kind", "pipeline"]) == 0
    out = capsys.readouterr().out
    assert "pipeline" in out and "allreduce" not in out


def test_report_defaults_to_latest_run_of_each_kind(stored, tmp_path, capsys):
    latest = runs_mod.latest_per_kind(stored["root"])
    kinds = [runs_mod.summarize(p)["kind"] for p in latest]
    assert kinds[:4] == ["collectives", "allreduce", "pipeline", "strategies"]
    out = tmp_path / "rep"
    assert main(["report", "--out", str(stored["root"]), "--output-dir", str(out)]) == 0
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out


def test_errors_are_bench_errors():
    with pytest.raises(BenchError):
        runs_mod.resolve_run_dir("/definitely/not/here")


def test_report_opens_with_a_headline_card_per_kind(full_report):
    """Issue 23: the answer first (a plot and a short table per kind, each from the kind's own
    Report.headline), then the run metadata and honesty flags folded, then the details."""
    html = full_report.read_text()
    glance, runs = html.index('<section id="glance">'), html.index('<section id="runs">')
    assert glance < runs < html.index('<section id="collectives">')
    assert '<details class="runs">' in html  # folded (not open) when headlines lead the page
    cards = html[glance:runs].split('<div class="card')[1:]
    assert len(cards) == 4
    for card, kind, img, words in zip(cards, ("collectives", "allreduce", "pipeline", "strategies"),
                                      ("headline_collectives_busbw.png", "headline_allreduce_busbw.png",
                                       "headline_pipeline_throughput.png", "headline_strategies_throughput.png"),
                                      ("peak busbw", "peak busbw", "bubble", "samples/s")):
        assert f'href="#{kind}"' in card and card.count("<img ") == 1 and img in card and "<table" in card, kind
        assert words in card, kind
    assert "flags)" in html[runs:runs + 400]  # the folded summary counts the honesty flags
