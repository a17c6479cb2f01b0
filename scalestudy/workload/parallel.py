"""Tensor, pipeline and sharded data parallelism of the transformer workload, built the
way torchtitan builds them: one DeviceMesh over ("pp", "dp", "tp") (only the dimensions
> 1), pipeline stages cut first, then `parallelize_module` for tp, then the data-parallel
wrapper over the "dp" dimension (FSDP2 `fully_shard` per block and the root).

The backend here (`ParallelBackend`) runs `--backend fsdp` (any model, any layout) and
`--backend ddp` when tp or pp > 1; data-parallel-only ddp stays torch DDP (ddp.py).

Every rank builds the whole model from the same seed and keeps its part, so the shards
cut one model and a run's loss can be compared with a single rank's (the tests do).

* Tensor parallel (Megatron-style, no sequence parallel): Q, K, V and MLP-in column-wise,
  attention-out and MLP-out row-wise, the token embedding vocabulary-parallel (row-wise)
  and the head column-wise with replicated logits; the head and embedding weights are
  one DTensor again after `parallelize_module` distributed it twice. LayerNorms and the
  position embedding stay replicated plain tensors: their inputs are replicated, so
  every tp rank computes the same gradients.
* Pipeline: `PipelineStage` + `ScheduleGPipe` / `Schedule1F1B`, micro-batches split
  along the batch; the loss is averaged over micro-batches (scale_grads). The tied
  embedding lives on the first stage (lookup) and the last (head): after backward the
  two copies' gradients are summed over a group of those two ranks (Megatron's
  embedding all-reduce), so both take the same optimizer step.
* Data parallel with tp or pp: torch DDP does not compose with either here (measured,
  torch 2.13): with pipelining micro-batches its reducer fails ("rebuilt parameter
  indices size is not same as original model parameters size"), and with DTensor
  parameters torch's only bridge (`_pre_dp_module_transform`) fails on the tied weight
  ("got mixed torch.Tensor and DTensor"); torchtitan, too, allows DDP on 1-D meshes
  only. So `--backend ddp` then uses torch's FSDP2-based `replicate`
  (torch.distributed._composable.replicate_with_fsdp, a private API): the same gradient
  all-reduce, composable with DTensor and stages; the record names the wrapper.

gloo on CPU (torch 2.13, measured): everything above runs for real. FSDP2's
reduce_scatter_tensor and all_gather_into_tensor, DTensor's all-reduce/all-gather
redistributions and pipelining's send/recv are all implemented by gloo; no fallback is
needed. Losses after 3 SGD steps equal a single rank's to ~1e-6 (see the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .ddp import allreduce_buffer, gather
from .ddp import shutdown as ddp_shutdown
from .layout import Layout
from .models import shard_units
from .options import Value
from .train import Batch, LRScheduler, T, TrainConfig, make_optimizer, make_scheduler, plain_step
from .transformer import GPT


def build_mesh(layout: Layout, device: torch.device) -> DeviceMesh:
    """The job's DeviceMesh: ("pp", "dp", "tp"), dimensions of size 1 left out."""
    dims = layout.mesh_dims()
    return init_device_mesh(device.type, tuple(size for _, size in dims),
                            mesh_dim_names=tuple(name for name, _ in dims))


def sub_mesh(mesh: DeviceMesh, name: str) -> DeviceMesh | None:
    """The 1-D mesh of dimension `name`, or None when the mesh lacks it."""
    return mesh[name] if name in (mesh.mesh_dim_names or ()) else None


def stage_layers(n_layers: int, pp: int, stage: int) -> tuple[int, int]:
    """Blocks [first, last) of pipeline stage `stage` (layers divide evenly)."""
    per = n_layers // pp
    return stage * per, (stage + 1) * per


def apply_tp(model: GPT, mesh: DeviceMesh) -> None:
    """Megatron-style tensor parallelism over `mesh` (1-D), in place."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        ParallelStyle,
        RowwiseParallel,
        parallelize_module,
    )

    plan: dict[str, ParallelStyle] = {}
    if model.tok_emb is not None:
        plan["tok_emb"] = RowwiseParallel(input_layouts=Replicate(),
                                          output_layouts=Replicate())
    for key in model.blocks:
        for name in ("attn.q", "attn.k", "attn.v", "mlp.fc"):
            plan[f"blocks.{key}.{name}"] = ColwiseParallel()
        for name in ("attn.o", "mlp.proj"):
            plan[f"blocks.{key}.{name}"] = RowwiseParallel()
    if model.head is not None:
        plan["head"] = ColwiseParallel(output_layouts=Replicate())
    parallelize_module(model, mesh, plan)
    if model.tok_emb is not None and model.head is not None:
        model.head.weight = model.tok_emb.weight  # one (vocabulary-sharded) weight again


def _units(model: nn.Module) -> Iterator[nn.Module]:
    """The modules FSDP shards one by one: transformer blocks, ResNet stages."""
    for parent, name in shard_units(model):
        yield getattr(parent, name)


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, reshard_after_forward: bool,
               param_dtype: torch.dtype | None = None) -> None:
    """FSDP2: each block (or ResNet stage), then the root, sharded over `mesh`; with a
    `param_dtype`, parameters are gathered and computed in it and gradients reduced in
    fp32 (FSDP2's MixedPrecisionPolicy), else they stay fp32 and autocast casts per op."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) \
        if param_dtype is not None else MixedPrecisionPolicy()
    for unit in _units(model):
        fully_shard(unit, mesh=mesh, reshard_after_forward=reshard_after_forward,
                    mp_policy=policy)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward,
                mp_policy=policy)


def apply_replicate(model: nn.Module, mesh: DeviceMesh) -> None:
    """Data parallelism by gradient all-reduce (FSDP2-based `replicate`), per block."""
    from torch.distributed._composable.replicate_with_fsdp import replicate

    for unit in _units(model):
        replicate(unit, mesh=mesh)
    replicate(model, mesh=mesh)


def tied_embedding_group(layout: Layout) -> dist.ProcessGroup | None:
    """With pp > 1, the group of the first and the last stage that hold the same piece
    of the tied embedding (same dp and tp index); every rank must call this."""
    if layout.pp == 1:
        return None
    span = layout.dp * layout.tp
    pairs = [[i, (layout.pp - 1) * span + i] for i in range(span)]
    group, _ = dist.new_subgroups_by_enumeration(pairs)
    return group


def sum_tied_gradient(param: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Sum the gradient of the tied embedding over the first and the last stage.

    A vocabulary-parallel embedding's gradient comes back from DTensor replicated while
    the head's is sharded like the weight: both are brought to the weight's placement
    first, so the two ranks add the same rows.
    """
    from torch.distributed.tensor import DTensor

    grad = param.grad
    if grad is None:
        return
    if isinstance(grad, DTensor) and isinstance(param, DTensor):
        if grad.placements != param.placements:
            grad = grad.redistribute(grad.device_mesh, param.placements)
            param.grad = grad
        dist.all_reduce(grad.to_local(), group=group)
    else:
        dist.all_reduce(grad, group=group)


_DDP_ONLY = ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook",
             "sim_latency_ms", "sim_ns_per_byte")


class ParallelBackend:
    """`--backend fsdp`, and `--backend ddp` with tp or pp > 1."""

    wire = "none"

    def __init__(self, name: str, options: Mapping[str, Value], layout: Layout,
                 rank: int) -> None:
        self.name = name
        self.options = dict(options)
        self.layout = layout
        self.rank = rank
        #: data parallel only: time compute-only steps on the bare model first
        self.bare_compute = layout.model_parallel == 1
        if layout.dp == 1 and layout.model_parallel > 1:
            self.dp_wrapper = "none"  # no "dp" dimension to wrap over
        else:
            self.dp_wrapper = "fully_shard" if name == "fsdp" else "replicate"

    def param_dtype(self, cfg: TrainConfig) -> torch.dtype | None:
        """FSDP2's parameter dtype: the run's autocast dtype under `param_dtype: compute`,
        else None (fp32 parameters)."""
        from .train import AMP_DTYPES

        if self.name != "fsdp" or self.options.get("param_dtype", "fp32") != "compute":
            return None
        return AMP_DTYPES.get(cfg.precision)

    def ignored(self) -> str:
        """What the run was asked for but does not do ("" when nothing): DDP's own
        options when the data-parallel wrapper is not DDP."""
        from .options import DEFAULTS

        flags = [f"--{k.replace('_', '-')}" for k in _DDP_ONLY
                 if self.name == "ddp" and self.options.get(k, DEFAULTS[k]) != DEFAULTS[k]]
        if not flags:
            return ""
        return (f"{', '.join(flags)} ignored: with tp or pp the data-parallel wrapper is "
                f"{self.dp_wrapper}, not torch DDP")

    def wrap(self, model: nn.Module, cfg: TrainConfig, device: torch.device,
             batch: Batch) -> Callable[[], torch.Tensor | None]:
        """Cut the stage, split the layers, wrap for data parallelism; the step."""
        layout = self.layout
        mesh = build_mesh(layout, device)
        where = layout.coordinates(self.rank)
        first = last = True
        if layout.pp > 1:
            assert isinstance(model, GPT)
            first, last = where["pp"] == 0, where["pp"] == layout.pp - 1
            model.keep_stage(*stage_layers(model.cfg.n_layers, layout.pp, where["pp"]),
                             is_first=first, is_last=last)
        if layout.tp > 1:
            assert isinstance(model, GPT)
            apply_tp(model, mesh["tp"])
        dp_mesh = sub_mesh(mesh, "dp")
        if dp_mesh is not None and self.dp_wrapper == "fully_shard":
            apply_fsdp(model, dp_mesh, bool(self.options.get("reshard_after_forward", True)),
                       self.param_dtype(cfg))
        elif dp_mesh is not None and self.dp_wrapper == "replicate":
            apply_replicate(model, dp_mesh)
        optimizer = make_optimizer(model.parameters(), cfg)
        scheduler = make_scheduler(optimizer, cfg)
        if layout.pp == 1:
            if layout.tp == 1:  # what a checkpoint saves (data parallel only)
                self.trained = (model, optimizer, scheduler)
            return plain_step(model, optimizer, scheduler, cfg, device, batch)
        assert isinstance(model, GPT)
        return self._pipeline_step(model, mesh, optimizer, scheduler, cfg, batch,
                                   first, last)

    def _pipeline_step(self, model: GPT, mesh: DeviceMesh, optimizer: torch.optim.Optimizer,
                       scheduler: LRScheduler, cfg: TrainConfig, batch: Batch, first: bool,
                       last: bool) -> Callable[[], torch.Tensor | None]:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        from .train import AMP_DTYPES

        layout = self.layout
        model.autocast_dtype = AMP_DTYPES.get(cfg.precision)
        device = batch.data.device
        stage = PipelineStage(model, self.layout.coordinates(self.rank)["pp"], layout.pp,
                              device, group=mesh["pp"].get_group())
        schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[layout.pp_schedule]
        schedule = schedule_class(stage, n_microbatches=layout.microbatches,
                                  loss_fn=nn.CrossEntropyLoss())
        tied_group = tied_embedding_group(layout)
        tied = (model.tok_emb.weight if first and model.tok_emb is not None
                else model.head.weight if last and model.head is not None else None)

        def step() -> torch.Tensor | None:
            optimizer.zero_grad(set_to_none=True)
            losses: list[torch.Tensor] = []
            if first:
                schedule.step(batch.data, return_outputs=False)
            elif last:
                schedule.step(target=batch.target, losses=losses, return_outputs=False)
            else:
                schedule.step(return_outputs=False)
            if tied is not None and tied_group is not None:
                sum_tied_gradient(tied, tied_group)
            optimizer.step()
            scheduler.step()
            return torch.stack(losses).mean().detach() if losses else None

        return step

    def compute_step(self) -> Callable[[], object]:
        """Not used: compute-only steps run on the bare model (data parallel only)."""
        raise NotImplementedError("compute-only steps run on the bare model before wrap")

    def allreduce(self, size_bytes: int, device: torch.device) -> Callable[[], object]:
        """dist.all_reduce of one fp32 buffer over all ranks (the probe)."""
        return allreduce_buffer(size_bytes, device)

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj`, in rank order."""
        return gather(obj)

    def shutdown(self, device: torch.device) -> None:
        """Barrier, garbage collected, the process group destroyed (as DDP's)."""
        ddp_shutdown(device)

    def describe(self) -> dict[str, object]:
        """The data-parallel wrapper and its settings."""
        out: dict[str, object] = {"dp_wrapper": self.dp_wrapper}
        if self.name == "fsdp":
            out["reshard_after_forward"] = self.options.get("reshard_after_forward", True)
            out["param_dtype"] = self.options.get("param_dtype", "fp32")
        return {self.name: out}
