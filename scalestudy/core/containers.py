"""Containers in a spec: what a run's ranks run in (data only; site/containers.py renders
each runtime's launch words, the plan checks the runtime's name against them).

A container is written `runtime:image` (`charliecloud:/scratch/img`,
`apptainer:/soft/pytorch.sif`) or as a mapping with options; `none` is the bare run.
`container:` at the top of a spec puts every run in one; `grid.container` makes it an
axis, so the same points run bare and containerised side by side. The launcher stays
outside: one container per rank.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, StringConstraints

from scalestudy.core.specbase import Model

#: The bare run's value on a container axis.
NONE = "none"

Runtime = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9-]{0,31}$")]
#: An image: a path or a registry reference, one word (it is shell-quoted where rendered).
Image = Annotated[str, StringConstraints(pattern=r"^[^\s\x00'\"`$\\]+$", min_length=1)]
#: One argument of the runtime (quoted where rendered).
Arg = Annotated[str, StringConstraints(pattern=r"^[^\n\r\x00]+$", min_length=1)]
#: A bind: `SRC[:DST]`, absolute paths.
Bind = Annotated[str, StringConstraints(pattern=r"^/[^\s\x00:,'\"`$\\]*(:/[^\s\x00:,'\"`$\\]*)?$")]


class Container(Model):
    """A container the ranks run in: the runtime, the image and what the run adds."""

    runtime: Runtime = Field(description="the container runtime: apptainer, singularity, "
                             "charliecloud, podman-hpc, shifter or pyxis (Enroot through "
                             "srun)")
    image: Image = Field(description="the image: a SIF or squashfs file, an unpacked "
                         "directory (Charliecloud), or a registry reference "
                         "(docker://..., nvcr.io#nvidia/pytorch:24.01-py3)")
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$")] \
        | None = Field(default=None, description="its name in tables and reports; default "
                       "`runtime:image`")
    options: list[Arg] = Field(default_factory=list,
                               description="more options of the runtime's launch command")
    binds: list[Bind] = Field(default_factory=list, description="more directories to bind, "
                              "SRC[:DST] (the study's results directory is always bound)")
    python: Arg = Field(default="python3", description="the Python inside the image that "
                        "runs the bundled benchmark (scalestudy and torch installed in it)")

    @property
    def label(self) -> str:
        """Its name in the run's parameters and the report."""
        return self.name or f"{self.runtime}:{self.image}"


def parse(value: object) -> object:
    """`none` stays; `runtime:image` becomes {runtime, image}; a mapping is as written."""
    if isinstance(value, str) and value != NONE:
        runtime, sep, image = value.partition(":")
        if not sep or not image:
            raise ValueError(f"container {value!r}: write `runtime:image` (e.g. "
                             "charliecloud:/scratch/img), `none`, or a mapping with "
                             "runtime and image")
        return {"runtime": runtime, "image": image}
    return value


Entry = Annotated[Container | Annotated[str, StringConstraints(pattern=f"^{NONE}$")],
                  BeforeValidator(parse)]


def label(entry: Container | str | None) -> str | None:
    """An entry's label: `none` for the bare run, None where the study has no container."""
    if entry is None:
        return None
    return entry if isinstance(entry, str) else entry.label
