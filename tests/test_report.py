"""report: plots on plain Figures, Markdown + self-contained HTML, atomic swap."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from matplotlib import _pylab_helpers
from matplotlib.figure import Figure

from scalestudy.report import plots
from scalestudy.report.build import build_report, plot_efficiency, plot_throughput
from scalestudy.results.analysis.collect import collect, read_runs
from scalestudy.results.analysis.efficiency import scaling_table
from scalestudy.results.analysis.quality import host_view
from scalestudy.results.analysis.study import analyse

PNG = b"\x89PNG\r\n\x1a\n"


def write_report(root: Path, name: str, description: str, scaling: str, runs: pd.DataFrame,
                 table: pd.DataFrame) -> Path:
    """Analyse the runs and draw the report; the table the test built must be the one
    the analysis builds (default baseline and thresholds)."""
    analysis = analyse(name, scaling, runs)
    pd.testing.assert_frame_equal(analysis.table, host_view(table))
    return build_report(root, analysis, description).html


def params(nodes: int, rpn: int, repeat: int = 0, model: str = "small_cnn") -> dict:
    p = nodes * rpn
    return {"run_id": f"{model}-{nodes}x{rpn}-{repeat}", "study": "demo", "system": "local",
            "scaling": "weak", "nodes": nodes, "ranks_per_node": rpn, "world_size": p,
            "batch_size": 16, "global_batch": 16 * p, "backend": "ddp", "tuning": "default",
            "repeat": repeat, "workload": "synthetic", "model": model, "image_size": 32,
            "precision": "fp32"}


def write_run(study: Path, p: dict, throughput: float | None, state: str = "completed",
              reason: str | None = None) -> None:
    d = study / "runs" / p["run_id"]
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps(p))
    (d / "status.json").write_text(json.dumps({"state": state, "exit_code": 0,
                                               "elapsed_s": 3.0, "reason": reason}))
    if throughput is not None:
        (d / "metrics.jsonl").write_text(json.dumps(
            {"throughput": throughput, "hosts": ["a"] * p["nodes"]}) + "\n")


@pytest.fixture
def study(tmp_path: Path) -> tuple[Path, pd.DataFrame, pd.DataFrame]:
    """Two models, 1..8 GPUs, 2 repeats, one failed run with an HTML-ish reason."""
    planned = []
    for model, eff in (("small_cnn", 0.9), ("resnet18", 0.97)):
        for n, r in ((1, 1), (1, 2), (1, 4), (2, 4)):
            for rep in (0, 1):
                p = params(n, r, rep, model)
                planned.append(p)
                size = n * r
                write_run(tmp_path, p, 100.0 * size * eff ** (size.bit_length() - 1)
                          * (1 + 0.02 * rep))
    bad = params(4, 4, 0, "resnet18")
    planned.append(bad)
    write_run(tmp_path, bad, None, state="failed", reason="exit code 1: <oops> & more")
    runs = collect(tmp_path, planned)
    return tmp_path, runs, scaling_table(runs, "weak")


def test_plots_draw_on_a_plain_figure(study: tuple[Path, pd.DataFrame, pd.DataFrame]) -> None:
    _, _, table = study
    fig = Figure()
    ax1, ax2 = fig.subplots(1, 2)
    plot_throughput(table, ax1)
    plot_efficiency(table, ax2)
    assert (ax1.get_xscale(), ax1.get_yscale()) == ("log", "log")
    assert ax2.get_xscale() == "log"
    assert ax2.get_ylim()[0] == 0
    assert any(list(line.get_ydata()) == [1.0, 1.0] for line in ax2.get_lines())
    assert "img/s" in ax1.get_ylabel()
    assert "GPUs" in ax1.get_xlabel()
    labels = [t.get_text() for t in ax1.get_legend().get_texts()]
    assert "small_cnn batch 16" in labels
    assert _pylab_helpers.Gcf.get_num_fig_managers() == 0


def test_write_report(study: tuple[Path, pd.DataFrame, pd.DataFrame]) -> None:
    root, runs, table = study
    out = write_report(root, "demo", "A <b>test</b> study.", "weak", runs, table)
    rep = root / "report"
    assert out == rep / "index.html"
    assert sorted(f.name for f in rep.iterdir()) == [
        "cost.csv", "cost.png", "efficiency.png", "failures.csv", "flags.csv", "hours.csv",
        "hours.png", "index.html", "index.md", "model.png", "model_fit.csv",
        "model_points.csv", "model_predictions.csv", "ring_bound.csv", "scaling.csv",
        "summary.json", "throughput.png", "variants.png"]
    assert not [f for f in root.iterdir() if f.name.startswith("report.")]
    for png in ("throughput.png", "efficiency.png", "cost.png"):
        assert (rep / png).read_bytes().startswith(PNG)

    md = (rep / "index.md").read_text()
    assert "## small_cnn batch 16" in md and "## resnet18 batch 16" in md
    assert "| 8 | 2 × 4 | 16 | 128 |" in md
    assert "](throughput.png)" in md and "](efficiency.png)" in md
    assert "## Failed runs" in md and "<oops>" in md
    assert "17 runs planned: 16 completed, 1 failed" in md
    assert "## Cost" in md and "Priced per a million samples" in md
    assert "](cost.png)" in md and "on the front" in md

    page = out.read_text()
    assert page.count("data:image/png;base64,") == 6  # with "Where the hours go"
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", page)
    assert "http" not in text and "//" not in text  # no network references
    srcs = re.findall(r'src="([^"]*)"', text)
    assert srcs == [""] * 6
    assert all(not h.startswith(("/", "http")) and ":" not in h
               for h in re.findall(r'href="([^"]*)"', text))
    assert "<table>" in page and "<td>2 × 4</td>" in page
    assert "&lt;oops&gt; &amp; more" in page and "<oops>" not in page
    assert "A &lt;b&gt;test&lt;/b&gt; study." in page

    data = pd.read_csv(rep / "scaling.csv")
    assert len(data) == len(table) == 8
    assert data["efficiency"].tolist() == pytest.approx(table["efficiency"].tolist())


def _plotting_fails(*_args: object) -> bytes:
    raise RuntimeError("plotting failed")


@pytest.mark.slow
def test_report_replaces_old_one_atomically(
        study: tuple[Path, pd.DataFrame, pd.DataFrame], monkeypatch: pytest.MonkeyPatch) -> None:
    root, runs, table = study
    (root / "report").mkdir()
    (root / "report" / "stale.png").write_bytes(b"old")
    write_report(root, "demo", "", "weak", runs, table)
    assert not (root / "report" / "stale.png").exists()
    before = (root / "report" / "index.md").read_text()

    # a module-level function: it pickles, so it also fails in a drawing process
    monkeypatch.setattr(plots, "render_png", _plotting_fails)
    with pytest.raises(RuntimeError):
        write_report(root, "demo", "", "weak", runs, table)
    assert (root / "report" / "index.md").read_text() == before
    assert sorted(f.name for f in root.iterdir()) == ["report", "runs", "runs.csv"]


def test_empty_report_says_so(tmp_path: Path) -> None:
    planned = [params(1, 1), params(1, 2)]
    runs = collect(tmp_path, planned)  # nothing ran yet: all pending
    table = scaling_table(runs, "weak")
    assert table.empty
    out = write_report(tmp_path, "empty", "", "weak", runs, table)
    md = (tmp_path / "report" / "index.md").read_text()
    assert "No completed runs yet" in md
    assert "2 runs planned: 2 pending" in md
    assert "No completed runs yet" in out.read_text()
    assert (tmp_path / "report" / "efficiency.png").read_bytes().startswith(PNG)


def test_table_from_runs_csv_matches(study: tuple[Path, pd.DataFrame, pd.DataFrame]) -> None:
    root, _, table = study
    again = scaling_table(read_runs(root / "runs.csv"), "weak")
    pd.testing.assert_frame_equal(again, table, check_dtype=False)


def test_single_repeat_with_rounding_noise_still_plots(tmp_path: Path) -> None:
    # These rates make eff - min * eff / median a hair below zero in floating point.
    planned = [params(1, 1), params(1, 2)]
    write_run(tmp_path, planned[0], 236.47459905774812)
    write_run(tmp_path, planned[1], 945.8179885983831)
    runs = collect(tmp_path, planned)
    table = scaling_table(runs, "weak")
    fig = Figure()
    plot_efficiency(table, fig.subplots())
    assert write_report(tmp_path, "noise", "", "weak", runs, table).is_file()


SPEC = """name: gate
system: local
scaling: weak
workload: {kind: synthetic, model: small_cnn, image_size: 32, iters: 20}
grid: {nodes: [1], ranks_per_node: [1, 2, 4, 8], batch_size: [16]}
references:
  - {metric: efficiency, value: 0.95, lower: -0.1, where: {world_size: 8}}
"""


def finished_study(root: Path, per_gpu: dict[int, float], spec: str = SPEC,
                   device: str | None = None) -> Path:
    """A study whose runs all completed with these per-GPU rates (no jobs run), on
    `device` where given."""
    from scalestudy.study import make_plan

    path = root / "study.yaml"
    path.write_text(spec)
    plan = make_plan(path, root / "results")
    for r in plan.runs:
        p = r.params()
        d = plan.run_dir(r)
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.json").write_text(json.dumps(p))
        (d / "status.json").write_text(json.dumps({"state": "completed", "exit_code": 0}))
        size = p["world_size"]
        record = {"throughput": per_gpu[size] * size, "iters": 20, "grad_bytes": 4e6,
                  "throughput_per_rank_min": per_gpu[size],
                  "throughput_per_rank_mean": per_gpu[size], "comm_overhead": 0.01 * size,
                  **({"device": device} if device else {})}
        (d / "metrics.jsonl").write_text(json.dumps(record) + "\n")
    return path


@pytest.mark.slow  # a whole report through the CLI
def test_a_cpu_study_counts_ranks_not_gpus(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    spec = finished_study(tmp_path, {1: 100.0, 2: 98.0, 4: 95.0, 8: 90.0}, device="cpu")
    done = run_cli("report", str(spec), "--results", "results", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "results/gate/report/index.md").read_text()
    headers = [line for line in md.splitlines() if line.startswith("| ranks |")]
    assert headers and "per-rank" in headers[0]
    cost = [line for line in md.splitlines() if line.startswith("| group | nodes |")]
    assert cost and "| ranks |" in cost[0] and "rank-hours" in cost[0]
    assert not any("GPU" in line for line in [*headers, *cost])


@pytest.mark.slow
def test_report_check_gates_on_references(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    good = finished_study(tmp_path, {1: 100.0, 2: 98.0, 4: 95.0, 8: 90.0})
    done = run_cli("report", str(good), "--results", "results", "--check", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "references: 1 passed, 0 failed" in done.stdout
    md = (tmp_path / "results/gate/report/index.md").read_text()
    assert "## References" in md and "| PASS | efficiency | world_size=8 |" in md
    assert "## Communication model" in md and "comm_overhead.png" in md

    # The same results with a slower 8-GPU point: 80 % < 95 % x 0.9.
    finished_study(tmp_path, {1: 100.0, 2: 98.0, 4: 95.0, 8: 80.0})
    done = run_cli("report", str(good), "--results", "results", "--check", "--json",
                   cwd=tmp_path)
    assert done.returncode == 1
    assert "error: 1 reference check(s) failed:" in done.stderr
    assert f"error: {good}:7: references[0]: efficiency 80.0% at batch 16, 1 × 8" \
        in done.stderr
    assert "Traceback" not in done.stderr
    # The report and its summary are written (and printed) all the same.
    summary = json.loads(done.stdout)
    assert summary == json.loads((tmp_path / "results/gate/report/summary.json").read_text())
    assert summary["references"]["failed"] == 1
    point = summary["groups"][0]["points"][-1]
    assert (point["world_size"], point["global_batch"]) == (8, 128)
    assert point["efficiency"] == pytest.approx(0.8)
    assert summary["model"]["fits"][0]["status"] == "fitted"
    assert any("below 90%" in f for f in summary["findings"])


@pytest.mark.slow
def test_report_options_and_extra_references(tmp_path: Path) -> None:
    from tests.conftest import run_cli

    spec = finished_study(tmp_path, {1: 100.0, 2: 98.0, 4: 95.0, 8: 90.0})
    refs = tmp_path / "refs.yaml"
    refs.write_text("- {metric: throughput, value: 1000, lower: -0.05, where: {nodes: 1, "
                    "ranks_per_node: 8}}\n")
    done = run_cli("report", str(spec), "--results", "results", "--references", str(refs),
                   "--check", "--baseline", "4", cwd=tmp_path)
    assert done.returncode == 1
    assert f"{refs}:1: references[0]: throughput 720.0" in done.stderr
    summary = json.loads((tmp_path / "results/gate/report/summary.json").read_text())
    assert summary["groups"][0]["baseline"]["world_size"] == 4
    bad = run_cli("report", str(spec), "--baseline", "half", "--results", "results",
                  cwd=tmp_path)
    assert bad.returncode == 2
    assert "Invalid value for '--baseline': 'half': use smallest, node or a world size" \
        in bad.stderr
    bad = run_cli("report", str(spec), "--latency", "tree", cwd=tmp_path)
    assert bad.returncode == 2
    assert "'tree' is not one of 'log', 'ring'" in bad.stderr


PROBE = """<img id="control" alt="control" src="data:image/png;base64,AAAA">
<script>window.addEventListener('load', () => {
  const imgs = [...document.images].filter(i => i.id !== 'control');
  document.body.dataset.images = imgs.map(i => i.naturalWidth + 'x' + i.naturalHeight).join(' ');
  document.body.dataset.control = document.getElementById('control').naturalWidth;
  document.body.dataset.rows = document.querySelectorAll('table tbody tr').length;
});</script></body>"""


@pytest.mark.slow
def test_html_renders_in_headless_chromium(
        study: tuple[Path, pd.DataFrame, pd.DataFrame], tmp_path: Path) -> None:
    """The page opens in a real browser: every image decodes, the tables have rows.
    A broken control image (width 0) shows the check can fail."""
    import os
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        if os.environ.get("SCALESTUDY_REQUIRE_CHROMIUM") == "1":
            pytest.fail("chromium is not installed (apt-get install chromium)")
        pytest.skip("chromium is not installed")
    root, runs, table = study
    page = write_report(root, "demo", "", "weak", runs, table)
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE))
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000",
         "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=120)
    body = re.search(r"<body([^>]*)>", done.stdout)
    assert body is not None, done.stderr[-2000:]
    attrs = dict(re.findall(r'data-(\w+)="([^"]*)"', body.group(1)))
    sizes = attrs["images"].split()
    assert len(sizes) == page.read_text().count("<img ") == 6  # the cost and hours plots too
    assert all(s == "800x500" for s in sizes), sizes
    assert attrs["control"] == "0"
    assert int(attrs["rows"]) >= len(table) + 1  # scaling rows + the failed run, and more
    assert "<h2>Findings</h2>" in done.stdout and "<td>2 × 4</td>" in done.stdout
    assert "<h2>Cost</h2>" in done.stdout and 'alt="Time to solution vs node-hours"' in \
        done.stdout


def test_flags_and_comm_overhead_are_shown(tmp_path: Path) -> None:
    from tests.test_efficiency import frame, run

    runs = frame([run(1, p, 100.0 * p) for p in (1, 2, 4)])
    runs["throughput_per_rank_min"] = [100.0, 100.0, 70.0]
    runs["throughput_per_rank_mean"] = 100.0
    runs["iters"] = [20, 20, 5]
    runs["comm_overhead"] = [0.0, 0.1, 0.2]
    write_report(tmp_path, "flags", "", "weak", runs, scaling_table(runs, "weak"))
    md = (tmp_path / "report" / "index.md").read_text()
    assert "| comm overhead | flags |" in md
    # No sync at one GPU: no comm overhead there (its 0.0 % would be timing noise).
    assert "| 1 | 1 × 1 | 16 | 16 | 100 [100–100] | 100 | 1.00 | 100.0% | 1 | — |  |" in md
    assert "| 4 | 1 × 4 | 16 | 64 | 400 [400–400] | 100 | 4.00 | 100.0% | 1 | 20.0% | " \
           "straggler, few-iters |" in md
    quality = md.split("## Quality flags")[1].split("##")[0]
    assert "| 1x4-0-0 | 1 × 4 | 16 | 0 | straggler, few-iters | 30.0% | n/a | 5 |" in quality
    assert "comm_overhead.png" in md
