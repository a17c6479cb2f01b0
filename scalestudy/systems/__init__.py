"""Site profiles: a machine described as data (scheduler, launcher, node shape, environment).

Profiles ship as YAML files in this package; a spec may also name a profile file by
path (`system: ./mysite.yaml`). The cluster profiles come with the scheduler backends.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from scalestudy.errors import SpecError, validation_messages
from scalestudy.spec import EnvName, Name


class SystemProfile(BaseModel):
    """One machine: how jobs are queued, how ranks start, what a node has."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name = Field(description="profile name used in `system:`")
    description: str = Field("", description="one line about the machine")
    scheduler: Literal["local"] = Field(description="how a job is queued")
    launcher: Literal["torchrun"] = Field(description="how ranks are started")
    gpus_per_node: int = Field(0, ge=0, description="GPUs per node (0: CPU ranks)")
    cores_per_node: int | None = Field(None, ge=1, description="CPU cores; null: detect")
    threads_per_rank: int | None = Field(
        None, ge=1, description="OMP_NUM_THREADS per rank; null: the node's cores / its ranks"
    )
    max_nodes: int = Field(1, ge=1, description="the most nodes a run may ask for")
    env: dict[EnvName, str] = Field(default_factory=dict, description="default environment")
    setup: list[str] = Field(default_factory=list, description="shell lines before the launch")
    docs: str = Field("", description="the user guide page the facts come from")


def available() -> list[str]:
    """Names of the profiles shipped with scalestudy."""
    return sorted(p.name.removesuffix(".yaml") for p in files(__name__).iterdir()
                  if p.name.endswith(".yaml"))


def load_system(name: str) -> SystemProfile:
    """A shipped profile by name, or a profile file by path (`*.yaml`)."""
    if name.endswith((".yaml", ".yml")):
        path = Path(name)
        if not path.is_file():
            raise SpecError(f"system: profile file {name} not found")
        text, source = path.read_text(encoding="utf-8"), str(path)
    elif name in available():
        resource = files(__name__) / f"{name}.yaml"
        text, source = resource.read_text(encoding="utf-8"), f"profile {name}"
    else:
        raise SpecError(
            f"system: unknown system {name!r}; valid systems: {', '.join(available())} "
            "(or the path of a profile .yaml)"
        )
    try:
        return SystemProfile.model_validate(yaml.safe_load(text))
    except ValidationError as exc:
        raise SpecError("\n".join(validation_messages(exc, SystemProfile, source, {}))) from None
