"""The job template's context as a typed record: what templates/*.sh.j2 (and a site's
own templates) may use. site.render.context fills it; execute.submitit_script reads it
too, so a renamed key fails mypy, not a rendered script."""

from __future__ import annotations

from typing import TypedDict

from scalestudy.core.values import JSONObject
from scalestudy.site.launchers import Word
from scalestudy.site.program import Program
from scalestudy.workload.options import Value


class TemplateContext(TypedDict):
    """What a job template (templates/*.sh.j2, a site's own) may use; `context` fills it."""

    version: str
    run: dict[str, Value]  # the run's parameters (run.json)
    what: str
    system_file: str
    run_dir: str
    workdir: str
    python: str
    program: Program
    directives: list[str]
    step: bool
    digest: str | None
    nodes_command: str | None
    port_base: int
    port_span: int
    launch: list[Word]
    env: dict[str, str]
    record_env_pattern: str
    secret_name_ere: str
    redacted: str
    setup: list[str]
    threads: int
    walltime: str
    system: JSONObject  # the profile, model_dump()ed
    tags: list[str]
