"""Right the first time on a real site: what a Polaris (and Aurora, Perlmutter) user
meets in a dry run, read from the rendered scripts and the messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalestudy.core.errors import SpecError
from scalestudy.core.grid import describe_run
from scalestudy.site import resolve
from scalestudy.site.plan import make_plan
from scalestudy.site.render import render

ACCOUNTS = "job: {account: MyProject}\n"


def spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("system", "gpus"), [("polaris", 4), ("aurora", 12),
                                              ("perlmutter", 4)])
def test_more_ranks_than_gpus_is_an_error_unless_asked_for(tmp_path: Path, system: str,
                                                           gpus: int) -> None:
    text = (f"name: s\nsystem: {system}\ngrid: {{nodes: [1, 2], ranks_per_node: "
            f"[{2 * gpus}]}}\n{ACCOUNTS}")
    with pytest.raises(SpecError) as raised:
        make_plan(spec(tmp_path, text), tmp_path)
    said = str(raised.value)
    assert f"s.yaml:3: grid.ranks_per_node: {2 * gpus} rank(s) per node on system " \
           f"'{system}', which has {gpus} GPUs per node: up to 2 ranks would share each " \
           "GPU" in said
    assert f"set ranks_per_node to {gpus} or fewer" in said and "job.share_gpus: true" in said
    shared = text.replace(ACCOUNTS, "job: {account: MyProject, share_gpus: true}\n")
    assert len(make_plan(spec(tmp_path, shared), tmp_path).runs) == 2


GPT = """name: gpt
system: polaris
workload: {model: gpt-125m, seq_len: 1024, precision: bf16}
grid: {nodes: [1], backend: [fsdp], tp: [1, 4]}
job: {account: MyProject}
"""


def test_a_transformer_job_shows_what_it_runs(tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, GPT), tmp_path)
    by_tp = {dict(r.axes).get("tp"): r for r in plan.runs}
    script = render(plan.study, plan.system, by_tp[4], tmp_path / "run")
    assert "--image-size" not in script and "--num-classes" not in script
    assert ("# 1 node(s) x 4 rank(s)/node = 4 rank(s); dp 1 x tp 4 x pp 1; batch 32 "
            "sequences per data-parallel replica (32 global) of 1024 tokens; backend fsdp"
            ) in script
    assert describe_run(plan.study, by_tp[1], short=True) == "1x4 b32 dp4 tp1 pp1 fsdp"
    image = make_plan(spec(tmp_path, "name: r\nsystem: polaris\n" + ACCOUNTS), tmp_path)
    assert "--image-size 224" in render(image.study, image.system, image.runs[0],
                                        tmp_path / "r")


def test_a_default_is_named_as_a_default_not_a_line(tmp_path: Path) -> None:
    plan = make_plan(spec(tmp_path, GPT.replace("nodes: [1], ", "")), tmp_path)
    nodes = next(v for v in resolve.values(plan.study, plan.system) if v.key == "grid.nodes")
    assert (nodes.value, nodes.origin, nodes.where) == ([1], "default",
                                                         "scalestudy's default")


def test_a_spec_names_the_python_the_jobs_start(tmp_path: Path) -> None:
    text = GPT.replace("job: {account: MyProject}",
                       "job: {account: MyProject, python: /eagle/p/venv/bin/python}")
    plan = make_plan(spec(tmp_path, text), tmp_path)
    assert "/eagle/p/venv/bin/python -m scalestudy.workload" in render(
        plan.study, plan.system, plan.runs[0], tmp_path / "run")
    with pytest.raises(SpecError, match=r"job\.python"):
        make_plan(spec(tmp_path, text.replace("/eagle/p", "eagle/p")), tmp_path)
