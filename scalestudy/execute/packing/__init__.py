"""Packing (`run --pack`): several runs as the steps of one scheduler job, in one package.

From the plan to the steps' end, one module per step:

- plan: which runs share an allocation, in what order, on how many nodes, for how long
  (pure: the planner, the queue's limits, what `plan --pack` says);
- engines: the ONE registry of what runs an allocation's steps (scalestudy's step runner,
  or a Flux instance nested in the allocation); callers ask an engine what it does
  (`flux_jobs`), and a scheduler what it offers (`Scheduler.packing`), never a name;
- scripts: the allocation's job script, and the study and profile its steps are rendered
  with under a nested Flux;
- allocations: writing an allocation's files and queueing it through the one submit loop
  (execute.submit), and whether this scheduler and engine can pack here at all;
- allocfile: allocation.json, the hand-off from the submitting side to the engine;
- runner, nested: the engines themselves, run inside the allocation with the standard
  library alone (`python -m scalestudy.execute.allocation DIR JOB_ID`: that path is kept
  because allocation scripts already queued name it);
- steplog: the step journal the engines write and the submitting side reads;
- steps: a packed run's state from its allocation's job and the step journal.

What stays outside, and why: `Scheduler.packing` (site.schedulers) is what each scheduler
declares, beside its other capabilities; study.packing holds the use cases that read the
results store (each run's expected time), which this layer cannot import; `job.pack` and
`job.pack_engine` are spec fields (core.spec), below every layer.
"""
