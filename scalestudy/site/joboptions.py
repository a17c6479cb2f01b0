"""Each scheduler's own `job:` options: the spec's `job.<scheduler>:` sections, checked by
that scheduler's options model; the old flat keys (`job.qos`, ...) read as the section of
every scheduler whose options have that name; the profile's defaults beneath them.

A study may carry the sections of several schedulers (it runs on several systems): each
registered one is checked, and the system's own becomes the jobs' request. Messages name
a key the way the spec writes it (`job.slurm.qos`, or `job.qos` in the old form).
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError, create_model
from pydantic_core import ErrorDetails

from scalestudy.core.errors import Loc, SpecError, note_once, validation_messages
from scalestudy.core.spec import LEGACY_KEYS, Job, Study
from scalestudy.site import schedulers
from scalestudy.site.profiles import SystemProfile, scheduler_own
from scalestudy.site.schedulers import Options, Scheduler

# Validated options, by the job (and system) they came from: a study renders thousands
# of runs from one job. The objects are held, so an id is never reused while cached.
_SPEC: dict[tuple[int, str], tuple[Job, Options]] = {}
_REQUEST: dict[tuple[int, int], tuple[Job, SystemProfile, Options]] = {}


def owners(key: str) -> list[str]:
    """The registered schedulers that have an option called `key`."""
    return [cls.name for cls in schedulers.classes() if key in cls.options.model_fields]


def _flat(job: Job, scheduler: Scheduler | type[Scheduler]) -> dict[str, Any]:
    """The old flat keys the spec sets that are options of `scheduler`."""
    fields = scheduler.options.model_fields
    return {k: getattr(job, k) for k in LEGACY_KEYS
            if k in fields and getattr(job, k) is not None}


def written(study: Study, scheduler: Scheduler, key: str) -> Loc | None:
    """Where the spec sets `scheduler`'s option `key` (None: it does not)."""
    if key in study.job.sections.get(scheduler.name, {}):
        return ("job", scheduler.name, key)
    return ("job", key) if key in _flat(study.job, scheduler) else None


def label(study: Study, scheduler: Scheduler, key: str) -> str:
    """`job.slurm.qos`, or `job.qos` where the spec writes the old form."""
    return ".".join(map(str, written(study, scheduler, key) or ("job", scheduler.name, key)))


def where(study: Study, scheduler: Scheduler, key: str) -> str:
    """`file:line: job.slurm.qos` (the line of the section, or of job:, where unset)."""
    return study.line_of(written(study, scheduler, key) or ("job", scheduler.name, key))


def spec_options(study: Study, scheduler: Scheduler) -> Options:
    """`scheduler`'s options as the spec sets them (its section over the old flat keys;
    `model_fields_set` says which); SpecError, with file:line, where they are wrong."""
    job = study.job
    held = _SPEC.get((id(job), scheduler.name))
    if held is not None and held[0] is job:
        return held[1]
    data = {**_flat(job, scheduler), **job.sections.get(scheduler.name, {})}
    try:
        made = scheduler.options.model_validate(data)
    except ValidationError as exc:
        raise SpecError("\n".join(_messages(exc, study, scheduler))) from None
    if len(_SPEC) > 64:
        _SPEC.clear()
    _SPEC[(id(job), scheduler.name)] = (job, made)
    return made


def spec_value(study: Study, scheduler: Scheduler, key: str) -> Any:
    """The value of `scheduler`'s option `key` as the spec sets it (None: unset)."""
    if key not in scheduler.options.model_fields:
        return None
    made = spec_options(study, scheduler)
    return getattr(made, key) if key in made.model_fields_set else None


def request_options(study: Study, system: SystemProfile) -> Options:
    """The options of the system's scheduler for the jobs: the spec's, else the profile's
    `scheduler_options` of the same name (`queue` for the queue option), else defaults."""
    job = study.job
    held = _REQUEST.get((id(job), id(system)))
    if held is not None and held[0] is job and held[1] is system:
        return held[2]
    scheduler = schedulers.get(system.scheduler)
    spec = spec_options(study, scheduler)
    data = profile_defaults(system).model_dump(exclude_unset=True)
    if scheduler.queue_key and system.scheduler_options.queue:
        data[scheduler.queue_key] = system.scheduler_options.queue
    made = spec
    if data:
        made = scheduler.options.model_validate(
            {**data, **spec.model_dump(include=spec.model_fields_set)})
    if len(_REQUEST) > 64:
        _REQUEST.clear()
    _REQUEST[(id(job), id(system))] = (job, system, made)
    return made


def profile_defaults(system: SystemProfile) -> Options:
    """The profile's defaults of its scheduler's own job options (checked as it loaded)."""
    return scheduler_own(system.scheduler_options, system.scheduler)[0]


def site_settings(system: SystemProfile) -> Options:
    """The profile's site settings of its scheduler (its `site_options`)."""
    return scheduler_own(system.scheduler_options, system.scheduler)[1]


def with_value(study: Study, scheduler: Scheduler, key: str, value: object) -> Study:
    """The study with `scheduler`'s option `key` set to `value` (in its section)."""
    job = study.job
    section = {**job.sections.get(scheduler.name, {}), key: value}
    update: dict[str, Any] = {"sections": {**job.sections, scheduler.name: section}}
    if key in LEGACY_KEYS:
        update[key] = None
    return study.model_copy(update={"job": job.model_copy(update=update)})


def problems(study: Study, system: SystemProfile) -> list[str]:
    """What is wrong with the spec's scheduler options, one `file:line: key: what, how to
    fix` each: a section no registered scheduler owns, a section its scheduler refuses, a
    key given in both forms, an old flat key the system's scheduler does not have."""
    out: list[str] = []
    registered = schedulers.names()
    job = study.job
    for name, section in job.sections.items():
        if name not in registered:
            keys = [k for k in Job.model_fields if k != "sections"]
            close = difflib.get_close_matches(name, [*registered, *keys], n=1, cutoff=0.6)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            out.append(f"{study.line_of(('job', name))}: not a key of job nor a registered "
                       f"scheduler{hint}; registered schedulers: {', '.join(registered)}")
            continue
        scheduler = schedulers.get(name)
        try:
            spec_options(study, scheduler)
        except SpecError as exc:
            out += str(exc).splitlines()
        out += [f"{study.line_of(('job', name, key))}: job.{key} gives it too (the old form): "
                f"remove job.{key}" for key in _flat(job, scheduler) if key in section]
    scheduler = schedulers.get(system.scheduler)
    for key in LEGACY_KEYS:
        if getattr(job, key) is not None and key not in scheduler.options.model_fields:
            out.append(f"{study.line_of(('job', key))}: system {system.name!r} uses "
                       f"{system.scheduler}, which has no {key}; {key} is a "
                       f"{' or '.join(owners(key))} option: remove it")
    return out


def legacy_note(study: Study, system: SystemProfile | None = None) -> str | None:
    """One line naming the old flat keys the spec uses and their new place, the system's
    scheduler's first (None: none)."""
    moved = []
    for key in LEGACY_KEYS:
        if getattr(study.job, key) is not None:
            names = sorted(owners(key), key=lambda n: system is None or n != system.scheduler)
            first, *rest = [f"job.{name}.{key}" for name in names] or [f"job.{key}"]
            moved.append(f"job.{key} is now {first}"
                         + (f" (or {', '.join(rest)})" if rest else ""))
    if not moved:
        return None
    first = next(k for k in LEGACY_KEYS if getattr(study.job, k) is not None)
    return (f"note: {study.line_of(('job', first)).rsplit(': ', 1)[0]}: "
            f"{'; '.join(moved)}; the old form is still read")


def unused_note(study: Study, system: SystemProfile) -> str | None:
    """One line naming the sections of other schedulers than the system's, which this
    system's runs do not read (None: none)."""
    others = [name for name in study.job.sections if name != system.scheduler]
    if not others:
        return None
    return (f"note: {study.line_of(('job', others[0])).rsplit(': ', 1)[0]}: "
            f"{', '.join(f'job.{n}' for n in others)} not used: system {system.name!r} uses "
            f"{system.scheduler} (its options go under job.{system.scheduler})")


def note_legacy(study: Study, system: SystemProfile | None = None) -> None:
    """Print `legacy_note` (and, given the system, `unused_note`) on stderr, each once
    per spec file in this process."""
    for note in (legacy_note(study, system), unused_note(study, system) if system else None):
        if note is not None:
            note_once(note)


def _messages(exc: ValidationError, study: Study, scheduler: Scheduler) -> list[str]:
    """A section's validation errors as `file:line: job.<name>.key: ...`, near misses
    named (the old flat keys were checked as the spec loaded: errors are the section's)."""
    section: type[BaseModel] = create_model(  # type: ignore[call-overload]
        "Job", **{scheduler.name: (scheduler.options, None)})
    root: type[BaseModel] = create_model("Study", job=(section, None))
    errors: list[ErrorDetails] = [{**e, "loc": ("job", scheduler.name, *e["loc"])}
                                  for e in exc.errors(include_url=False)]
    return validation_messages(errors, root, study.source or "<study>", study.lines)
