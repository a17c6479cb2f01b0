"""Machines as data: system profiles, schedulers (pure render/parse), launchers, the job
script renderer, and a study bound to its system (the plan)."""
