"""The spec's building blocks: the frozen base model and the models made from the option table.

Shared by core.spec (the study) and core.workloads (the workload kinds), so neither
imports the other's half.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from types import GenericAlias
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    create_model,
)

from scalestudy.workload.options import OPTIONS, Option

PosInt = Annotated[int, Field(ge=1)]


def as_list(value: object) -> Any:
    """Let a grid axis be written as one value: `nodes: 4` means `nodes: [4]`."""
    return value if isinstance(value, list) else [value]


def unique(values: list[Any]) -> list[Any]:
    dupes = sorted({str(v) for v in values if values.count(v) > 1})
    if dupes:
        raise ValueError(f"repeated value(s) {', '.join(dupes)}: list each value once")
    return values


def sections_apart(data: Any, keys: Collection[str]) -> Any:
    """`job:`'s mappings under names that are not its `keys` (`slurm: {qos: high}`) are
    scheduler sections: moved into `sections`, raw (site.joboptions checks each with its
    scheduler's options); anything else stays, for extra="forbid" to judge."""
    if not isinstance(data, dict):
        return data
    loose = {k: v for k, v in data.items()
             if isinstance(k, str) and k not in keys and isinstance(v, dict)}
    if not loose:
        return data
    kept = {k: v for k, v in data.items() if k not in loose}
    given = kept.get("sections")
    return {**kept, "sections": {**(given if isinstance(given, dict) else {}), **loose}}


def sections_inline(data: Any) -> Any:
    """A dump with its sections as a spec writes them (`slurm: {...}` beside the other
    keys): it reads back, and settings compare by the names a user knows."""
    if isinstance(data, dict) and "sections" in data:
        return {**{k: v for k, v in data.items() if k != "sections"}, **data["sections"]}
    return data


class Model(BaseModel):
    """Base of every spec model: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Where code builds a model itself (`default_factory=Job`), its fields give their
    # defaults as `Field(default=...)`: a type checker reads only that keyword.


def _option_type(option: Option) -> Any:
    """The Pydantic type of a training option's value (strict: `true` is not a number)."""
    if option.choices is not None:
        return Literal[option.choices]
    base = {bool: StrictBool, int: StrictInt, float: Annotated[float, Field(allow_inf_nan=False)],
            str: str}[option.kind]
    if option.minimum is not None or option.maximum is not None:
        base = Annotated[base, Field(ge=option.minimum, le=option.maximum)]
    if option.keyword is not None:  # e.g. `peak_tflops: measure`
        return base | Literal[option.keyword]
    return base


def _list_of(item: Any) -> Any:
    """`list[item]` for an item type known only at run time (a type checker reads
    `list[x]` as a static type, which `x` is not)."""
    return GenericAlias(list, (item,))


def _option_models() -> tuple[type[Model], type[Model], dict[str, Any]]:
    """(workload base values, a tuning variant's overrides, grid axes) from the table."""
    # dict[str, Any]: create_model's `**fields` share the keyword namespace of its own
    # options (__config__, __doc__, ...), so a splatted dict must fit those too.
    base: dict[str, Any] = {
        o.name: (_option_type(o), Field(o.default, description=o.help)) for o in OPTIONS
    }
    overrides: dict[str, Any] = {
        o.name: (_option_type(o) | None, Field(None, description=o.help)) for o in OPTIONS
    }
    axes = {
        o.name: (
            Annotated[_list_of(_option_type(o)), BeforeValidator(as_list), Field(min_length=1)]
            | None,
            Field(None, description=f"axis: {o.help}"),
        )
        for o in OPTIONS
    }
    return (create_model("TrainOptions", __base__=Model, **base),
            create_model("OptionOverrides", __base__=Model, **overrides), axes)


if TYPE_CHECKING:
    # Built from the option table at run time, so a type checker sees only their base;
    # the code reads the options by name (`getattr`, `model_dump`), not as attributes.
    TrainOptions = Model
    OptionOverrides = Model
    OPTION_AXES: dict[str, Any]
else:
    TrainOptions, OptionOverrides, OPTION_AXES = _option_models()


class LRPolicy(Model):
    """Learning rate scaled from a reference global batch (Goyal et al.), with warm-up."""

    base: float = Field(gt=0, allow_inf_nan=False, description="learning rate at `reference_batch`")
    reference_batch: PosInt = Field(256, description="global batch at which `base` applies")
    scaling: Literal["linear", "sqrt", "none"] = Field(
        "linear", description="lr = base x (global_batch / reference_batch), or its square root"
    )
    warmup_iters: int = Field(
        0, ge=0, description="steps over which the lr ramps up linearly from `base`"
    )

    def lr(self, global_batch: int) -> float:
        """The learning rate at `global_batch`."""
        ratio = global_batch / self.reference_batch
        factor = {"linear": ratio, "sqrt": math.sqrt(ratio), "none": 1.0}[self.scaling]
        return self.base * factor

