"""Op-group profile of a training step: where the time goes, against the FLOPs and bytes each op group moves.

``depthbench bench --profile`` runs this for every requested architecture and ``pre_ln`` at one shape. Each aten op
of a few profiled training steps (forward, backward, AdamW) is put into one group:

* ``gemm``: dense matrix products (``mm``, ``addmm``, ``mv``, ``addmv``, ``dot``): linear layers, the LM head, the
  depth-mixing dot products;
* ``small_bmm``: batched matrix products (``bmm``, ``baddbmm``): the HC/mHC stream mixing;
* ``attention``: the fused scaled-dot-product attention kernels and their backward;
* ``optimizer``: AdamW's fused / foreach kernels (on CPU AdamW runs plain per-parameter elementwise ops, which
  land in ``memory_bound``);
* ``dispatch``: ops that move no data themselves: views and metadata (``view``, ``transpose``, ``as_strided``,
  ...), empty allocations, and wrappers (``linear``, ``matmul``, ``to``) whose kernels are counted in their own
  group; their time is dispatch;
* ``memory_bound``: everything else (elementwise ops, reductions, copies, norms, softmax, their backward).

Time is the ops' self CPU time (no double counting of nested calls), per training step. FLOPs are the profiler's own
count (it counts matrix products; elementwise FLOPs are not counted and are negligible next to them). Bytes are
what the ops *read*: the sizes of their tensor inputs (4 bytes per element for float32 runs; ``dispatch`` ops read
nothing).
A group whose time grows with its bytes and not its FLOPs is memory-bound; one whose time grows with its number of
calls at constant bytes is dispatch-bound. Timing the profiled steps inflates small ops (the profiler adds about
a microsecond per op), so compare groups and architectures within one run, not with `bench` step times.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

GROUPS = ("gemm", "small_bmm", "attention", "memory_bound", "dispatch", "optimizer")

_GEMM = {"aten::mm", "aten::addmm", "aten::mv", "aten::addmv", "aten::addmv_", "aten::dot", "aten::vdot",
         "aten::addr", "aten::linalg_vecdot"}
_SMALL_BMM = {"aten::bmm", "aten::baddbmm"}
_DISPATCH = {"aten::view", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias", "aten::t", "aten::transpose",
          "aten::permute", "aten::as_strided", "aten::expand", "aten::slice", "aten::select", "aten::narrow",
          "aten::unsqueeze", "aten::squeeze", "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::chunk",
          "aten::alias", "aten::detach", "aten::detach_", "aten::lift_fresh", "aten::resolve_conj",
          "aten::resolve_neg", "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::result_type",
          "aten::promote_types", "aten::is_nonzero", "aten::item", "aten::_local_scalar_dense", "aten::movedim",
          "aten::flatten", "aten::unflatten", "aten::contiguous", "aten::to", "aten::linear", "aten::matmul",
          "aten::numpy_T", "aten::size", "aten::stride", "aten::set_", "aten::zeros", "aten::ones"}


def op_group(name: str) -> str | None:
    """The group of aten op ``name`` (see the module docstring); ``None`` for non-aten events (annotations, autograd
    engine frames), whose time is already counted in the ops they run."""
    if not name.startswith("aten::"):
        return None
    if name in _GEMM:
        return "gemm"
    if name in _SMALL_BMM:
        return "small_bmm"
    if "scaled_dot_product" in name or "flash_attention" in name or "efficient_attention" in name:
        return "attention"
    if name.startswith("aten::_foreach") or name.startswith("aten::_fused_adam"):
        return "optimizer"
    if name in _DISPATCH:
        return "dispatch"
    return "memory_bound"


def _input_bytes(shapes: list, element_size: int) -> int:
    total = 0
    for shape in shapes:
        if isinstance(shape, (list, tuple)) and all(isinstance(n, int) for n in shape):
            numel = 1
            for n in shape:
                numel *= n
            total += numel * element_size
    return total


def profile_steps(step: Callable[[], object], steps: int, element_size: int = 4) -> dict[str, dict[str, float]]:
    """Run ``step()`` ``steps`` times under ``torch.profiler`` and return, per group, the mean per step of ``ms``
    (self CPU time), ``gflop``, ``gb_read`` and ``calls``, plus a ``total`` row."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        for _ in range(steps):
            step()
    rows = {group: {"ms": 0.0, "gflop": 0.0, "gb_read": 0.0, "calls": 0.0} for group in (*GROUPS, "total")}
    for event in prof.key_averages(group_by_input_shape=True):
        group = op_group(event.key)
        if group is None:
            continue
        read = 0 if group == "dispatch" else _input_bytes(event.input_shapes or [], element_size) * event.count
        for target in (rows[group], rows["total"]):
            target["ms"] += event.self_cpu_time_total / 1e3 / steps
            target["gflop"] += (event.flops or 0) / 1e9 / steps
            target["gb_read"] += read / 1e9 / steps
            target["calls"] += event.count / steps
    return rows


def mean_rows(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The element-wise mean of several :func:`profile_steps` results."""
    return {group: {key: sum(run[group][key] for run in runs) / len(runs) for key in runs[0][group]}
            for group in runs[0]}


def format_profile(profiles: dict[str, dict[str, dict[str, float]]], reference: str = "pre_ln") -> str:
    """A Markdown table: one row per op group, one column per model, cells ``ms / GFLOP / GB read / calls``; then
    each model's totals as ratios to ``reference``."""
    names = list(profiles)
    header = "| op group (ms / GFLOP / GB read / calls per step) | " + " | ".join(f"`{n}`" for n in names) + " |"
    lines = [header, "|---|" + "---:|" * len(names)]
    for group in (*GROUPS, "total"):
        cells = [f"{p[group]['ms']:.1f} / {p[group]['gflop']:.2f} / {p[group]['gb_read']:.2f} / "
                 f"{p[group]['calls']:.0f}" for p in profiles.values()]
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    if reference in profiles:
        ref = profiles[reference]["total"]
        for key, label in (("ms", "time"), ("gflop", "FLOPs"), ("gb_read", "bytes read"), ("calls", "aten calls")):
            cells = [f"{p['total'][key] / ref[key]:.2f}x" if ref[key] else "-" for p in profiles.values()]
            lines.append(f"| {label} vs `{reference}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def element_size(dtype: str) -> int:
    """Bytes per element the profile assumes for a run in ``dtype`` (``"float32"`` or ``"bfloat16"``; under bf16
    autocast the GEMM inputs are bf16 and the rest mostly fp32, so the bf16 figure is a lower bound)."""
    return torch.empty((), dtype=getattr(torch, dtype)).element_size()
