"""PBS Pro's own `job.pbs:` options: the spec's section, over the profile's defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from scalestudy.core.spec import Token
from scalestudy.site.schedulers import Options


class PBSOptions(Options):
    """`job.pbs:` (over the profile's `scheduler_options` of the same names)."""

    queue: Token | list[Token] | None = Field(None, description="queue (-q); several: each "
                                              "run to the first whose limits take it")
    filesystems: Token | None = Field(None, description="-l filesystems, e.g. home:eagle")
    place: Token | None = Field(None, description="-l place, e.g. scatter")
    select_terms: dict[Token, Token] = Field({}, description="more terms of -l select")
    gpus_directive: Literal["gpus-per-node", "gres", "none"] = Field(
        "gpus-per-node", description="none: -l select asks whole nodes, else ngpus too")
