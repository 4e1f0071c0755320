"""Reporting: the per-shape results table, the train-step targets, and the summary over shapes (worst and median
ratios against ``pre_ln``, target met or not) with its table. Plain Python (no torch)."""

from __future__ import annotations

import math
import statistics

from depthbench.bench.settings import LLAMA, REFERENCE

TRAIN_TIME_TARGETS: dict[str, float] = {
    LLAMA: 1.03,  # the llama row holds pre_ln's time / Llama's: pre_ln within 1.03x of LlamaForCausalLM
    "hc": 1.20, "mhc": 1.30, "attnres": 1.20, "block_attnres": 1.10, "moda": 1.40, "denseformer": 1.08,
}
"""Eager train-step targets (time / ``pre_ln``'s, at every shape of the range; the norm family and any other
architecture: :data:`DEFAULT_TRAIN_TIME_TARGET`)."""
DEFAULT_TRAIN_TIME_TARGET = 1.08
COMPILED_TARGET = 1.15
"""Compiled train-step target for every architecture, relative to compiled ``pre_ln``."""
GPU_COMPILED_TARGETS: dict[str, float] = {
    "hc": 1.10, "mhc": 1.07, "attnres": 1.05, "block_attnres": 1.02, "moda": 1.15, "denseformer": 1.02,
}
"""Compiled train-step targets at the study's 400M-L24 and 400M-L32 shapes on an H100/H200-class GPU, bf16 (time /
compiled ``pre_ln``'s; ``mhc``: the mHC paper's fused-kernel figure), read by the GPU check
(``depthbench.bench.gpu_check``)."""
MFU_TARGET = 0.45
"""``pre_ln``'s model FLOPs utilisation at 400M-L24 on an H100/H200-class GPU (the trainer's 6N definition)."""


def _table(header: list[str], body: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first left-aligned, the others right-aligned."""
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
                     for row in [header, *body])


def format_results(results: list[dict]) -> str:
    """The human-readable table: step time, decode speed and peak memory with ratios vs pre_ln and Llama."""
    def num(x, spec):
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    sizes = list(results[0]["decode_tokens_per_s"]) if results else []
    header = ["model", "params", "step ms", "vs pre_ln", "vs llama", "paired vs llama", "train tok/s"]
    header += [f"dec tok/s bs{bs}" for bs in sizes] + [f"vs pre_ln bs{bs}" for bs in sizes]
    header += ["peak MB", "mem vs pre_ln", "rss vs pre_ln", "first loss"]
    compiled = bool(results) and "compiled" in results[0]
    header += ["compiled ms", "compiled vs pre_ln", "compile speed-up", "compiled first loss"] if compiled else []
    body = []
    for r in results:
        median = r["train_step_s_median"]
        line = [r["model"], f"{r['params'] / 1e6:.2f}M", num(None if median is None else 1e3 * median, ".1f"),
                num(r["train_time_ratio_vs_pre_ln"], ".3f"), num(r["train_time_ratio_vs_llama"], ".3f"),
                num(r["train_time_ratio_paired_vs_llama"], ".3f"), num(r["train_tokens_per_s"], ".0f")]
        line += [num(r["decode_tokens_per_s"].get(bs), ".1f") for bs in sizes]
        line += [num(r["decode_speed_ratio_vs_pre_ln"].get(bs), ".3f") for bs in sizes]
        mem = r["peak_mem_bytes"]
        line += [num(None if mem is None else mem / 2**20, ".0f"), num(r["peak_mem_ratio_vs_pre_ln"], ".3f"),
                 num(r.get("peak_rss_ratio_vs_pre_ln"), ".3f"), num(r["first_loss"], ".4f")]
        if compiled:
            c = r["compiled"]
            line += [num(None if c["train_step_s_median"] is None else 1e3 * c["train_step_s_median"], ".1f"),
                     num(c["train_time_ratio_paired_vs_pre_ln"], ".3f"), num(c["speedup_vs_eager"], ".3f"),
                     num(c["first_loss"], ".4f")]
        body.append(line)
    return _table(header, body)


def _worst_and_median(values: list[float | None]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    return (max(values), round(statistics.median(values), 4)) if values else (None, None)


def _collect(per_shape: list[list[dict]]) -> dict[str, dict]:
    """Per model, the lists over shapes of each ratio the summary reduces (for ``llama``: pre_ln's ratio vs Llama)."""
    rows: dict[str, dict] = {}
    for results in per_shape:
        for r in results:
            row = rows.setdefault(r["model"], {"model": r["model"], "shapes": [], "ratios": [], "decode": {},
                                               "mem": [], "compiled": [], "speedup": []})
            row["shapes"].append(r["shape"])
            if r["model"] == LLAMA:  # the Llama row reports pre_ln's overhead over Llama
                pre_ln = next(x for x in results if x["model"] == REFERENCE)
                row["ratios"].append(pre_ln["train_time_ratio_paired_vs_llama"])
            else:
                row["ratios"].append(r["train_time_ratio_paired_vs_pre_ln"])
            for bs, value in r["decode_speed_ratio_vs_pre_ln"].items():
                row["decode"].setdefault(bs, []).append(value)
            row["mem"].append(r["peak_mem_ratio_vs_pre_ln"])
            if "compiled" in r:
                row["compiled"].append(r["compiled"]["train_time_ratio_paired_vs_pre_ln"])
                row["speedup"].append(r["compiled"]["speedup_vs_eager"])
    return rows


def _summary(name: str, row: dict) -> dict:
    """One model's summary line from its :func:`_collect` row."""
    worst, median = _worst_and_median(row["ratios"])
    target = TRAIN_TIME_TARGETS.get(name, DEFAULT_TRAIN_TIME_TARGET)
    summary = {
        "summary": True, "model": name, "shapes": row["shapes"],
        "train_time_ratio_vs_pre_ln_worst": worst, "train_time_ratio_vs_pre_ln_median": median,
        "train_time_ratios": row["ratios"], "train_time_target": None if name == REFERENCE else target,
        "decode_speed_ratio_vs_pre_ln_worst": {bs: min((v for v in vs if v is not None), default=None)
                                               for bs, vs in row["decode"].items()},
        "peak_mem_ratio_vs_pre_ln_worst": _worst_and_median(row["mem"])[0],
    }
    if name == LLAMA:
        summary["note"] = "train-time ratios of pre_ln vs LlamaForCausalLM (target <= 1.03)"
    if name == REFERENCE:
        summary["train_time_ratio_vs_pre_ln_worst"] = summary["train_time_ratio_vs_pre_ln_median"] = 1.0
    if row["compiled"]:
        summary["compiled_ratio_vs_pre_ln_worst"], summary["compiled_ratio_vs_pre_ln_median"] = \
            _worst_and_median(row["compiled"])
        summary["compile_speedup_median"] = _worst_and_median(row["speedup"])[1]
        summary["compiled_target"] = None if name in (REFERENCE, LLAMA) else COMPILED_TARGET
    if summary["train_time_target"] is not None and worst is not None:
        summary["train_time_target_met"] = worst <= summary["train_time_target"]
    return summary


def summarize(per_shape: list[list[dict]]) -> list[dict]:
    """Per model, over shapes: worst and median paired train-step ratio vs ``pre_ln`` (for ``llama``: pre_ln's
    ratio vs Llama), worst decode-speed ratio per batch size, worst peak-memory ratio, and the compiled figures."""
    return [_summary(name, row) for name, row in _collect(per_shape).items()]


def format_summary(summaries: list[dict]) -> str:
    """The across-shapes table: worst / median train-step ratio, worst decode and memory ratios, compiled."""
    def num(x, spec=".3f"):
        return "-" if x is None else format(x, spec)

    sizes = sorted({bs for s in summaries for bs in s["decode_speed_ratio_vs_pre_ln_worst"]}, key=int)
    compiled = any("compiled_ratio_vs_pre_ln_worst" in s for s in summaries)
    header = ["model", "shapes", "worst", "median", "target", "met"]
    header += [f"decode bs{bs} worst" for bs in sizes] + ["mem worst"]
    header += ["compiled worst", "compiled median", "compile speed-up"] if compiled else []
    body = []
    for s in summaries:
        met = s.get("train_time_target_met")
        line = [s["model"] + (" (pre_ln vs llama)" if s["model"] == LLAMA else ""), str(len(s["shapes"])),
                num(s["train_time_ratio_vs_pre_ln_worst"]), num(s["train_time_ratio_vs_pre_ln_median"]),
                num(s["train_time_target"], ".2f"), "-" if met is None else ("yes" if met else "NO")]
        line += [num(s["decode_speed_ratio_vs_pre_ln_worst"].get(bs)) for bs in sizes]
        line += [num(s["peak_mem_ratio_vs_pre_ln_worst"])]
        if compiled:
            line += [num(s.get("compiled_ratio_vs_pre_ln_worst")), num(s.get("compiled_ratio_vs_pre_ln_median")),
                     num(s.get("compile_speedup_median"))]
        body.append(line)
    return _table(header, body)
