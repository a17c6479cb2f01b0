"""This host as a scheduler: no queue, no directives; execute.local runs each script here."""

from __future__ import annotations

from scalestudy.site.schedulers import JobRequest, Scheduler, register


@register
class Local(Scheduler):
    """This host: scripts run one after the other, no job ids, every "node" is this host."""

    name = "local"
    queued = False
    one_host = True
    template = "local.sh.j2"

    def directives(self, job: JobRequest) -> list[str]:
        """No directives: the script runs directly."""
        return []
