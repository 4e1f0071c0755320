"""What every metric shares: the analysis context (model adapter, windows, micro-batching, precision, progress) and
the result files (one JSON with values + settings + model id, a CSV where tabular, a PNG)."""

from __future__ import annotations

import contextlib
import csv
import io
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from depthbench import atomic

from .sampling import WindowSpec, micro_batches
from .state import ModelAdapter, Trace

#: Pairs (s, l) / (i, j) with both indices in the last three quarters of the network count as "late" (study,
#: Fig. 5 threshold analysis: causal score > 0.45, permutation score > 0.15).
LATE_START_FRACTION = 0.25


def late_start(num_layers: int) -> int:
    """First block index of the "last three quarters" of an L-block network: ``floor(L / 4)``."""
    return int(num_layers * LATE_START_FRACTION)


class NeedsMoreData(ValueError):
    """The windows are too few for the metric (the message says how many are needed): an error when the metric was
    asked for by name, a skip with that message when it only came with the default metric list."""


class NotApplicable(ValueError):
    """The metric does not exist for this model (depth-mixing weights of a Pre-LN model, the Jacobian of a structured
    stream): ``depthbench analyze`` reports it and goes on with the other metrics (an error when no metric applies);
    bad options are plain ``ValueError`` and stop the command before anything is computed."""


def check_positions(model, seq_len: int) -> None:
    """ValueError when windows of ``seq_len`` tokens are longer than the model's ``max_position_embeddings``."""
    limit = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if isinstance(limit, int) and seq_len > limit:
        raise ValueError(f"windows of {seq_len} tokens are longer than the model's max_position_embeddings={limit} "
                         f"(positions {limit}..{seq_len - 1} were never configured for it): lower --seq-len to "
                         f"{limit} or less")


@dataclass
class AnalysisContext:
    """Model + windows + execution settings shared by the metrics of one ``analyze`` call."""

    model: Any
    windows: np.ndarray
    window_spec: WindowSpec
    model_id: str = ""
    micro_batch_size: int = 4
    batched: bool = True
    group_batch: int = 8
    progress: bool = True
    tokenizer: Any = None
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        check_positions(self.model, int(np.shape(self.windows)[1]))
        self.adapter = ModelAdapter(self.model)
        self.model.eval()
        self._traces: list[Trace] | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast on CUDA, plain fp32 elsewhere."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def batches(self, windows: np.ndarray | None = None) -> Iterator[torch.Tensor]:
        """Micro-batches of ``windows`` (default: all the context's windows) on the model's device."""
        for ids in micro_batches(self.windows if windows is None else windows, self.micro_batch_size):
            yield ids.to(self.device)

    def bar(self, iterable, desc: str, total: int | None = None, **kwargs):
        from depthbench.progress import progress_bar

        return progress_bar(iterable, desc=desc, total=total, disable=not self.progress, leave=False, **kwargs)

    def count_batches(self, windows: np.ndarray | None = None) -> int:
        return -(-len(self.windows if windows is None else windows) // self.micro_batch_size)

    @property
    def num_batches(self) -> int:
        return self.count_batches()

    def traces(self, desc: str = "forward", windows: np.ndarray | None = None) -> Iterator[Trace]:
        """Traces of the unmodified model per micro-batch of ``windows`` (default all; recomputed per metric:
        memory stays one batch)."""
        for ids in self.bar(self.batches(windows), desc, self.count_batches(windows)):
            with torch.no_grad(), self.autocast():
                yield self.adapter.trace(ids)

    def settings(self) -> dict:
        return {
            "model": self.model_id,
            "model_type": self.adapter.name,
            "family": self.adapter.family,
            "num_layers": self.adapter.num_layers,
            "windows": self.window_spec.describe(),
            "micro_batch_size": self.micro_batch_size,
            "batched_interventions": self.batched,
            "device": str(self.device),
            "precision": "bf16 autocast" if self.device.type == "cuda" else "fp32",
        }


@dataclass
class MetricResult:
    """What a metric returns: JSON-able ``values``, optional table ``rows`` (the CSV) and its settings."""

    metric: str
    values: dict
    rows: list[dict] | None = None
    settings: dict = field(default_factory=dict)
    seconds: float = 0.0


def write_result(result: MetricResult, out_dir: str, plot=None) -> dict[str, str]:
    """Write ``<metric>.json``, ``<metric>.csv`` (when rows) and ``<metric>.png`` (when ``plot``) into ``out_dir``.

    Files are written atomically (``depthbench.atomic``), so an interrupted run never leaves a half-written JSON that
    a resumed sweep would take for a finished metric."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    if result.rows:
        path = os.path.join(out_dir, f"{result.metric}.csv")
        keys: list[str] = []
        for row in result.rows:
            keys.extend(k for k in row if k not in keys)
        table = io.StringIO(newline="")
        writer = csv.DictWriter(table, fieldnames=keys)
        writer.writeheader()
        for row in result.rows:
            writer.writerow({k: atomic.json_safe(v) for k, v in row.items()})
        atomic.write_text(path, table.getvalue())
        paths["csv"] = path
    if plot is not None:
        path = os.path.join(out_dir, f"{result.metric}.png")
        if plot(result, path):
            paths["png"] = path
    path = os.path.join(out_dir, f"{result.metric}.json")
    payload = {"metric": result.metric, "settings": result.settings, "seconds": round(result.seconds, 3),
               "values": result.values, "files": {k: os.path.basename(v) for k, v in paths.items()}}
    atomic.write_json(path, payload)
    paths["json"] = path
    return paths


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def heatmap(matrix: np.ndarray, path: str, title: str, xlabel: str, ylabel: str, cmap: str = "viridis",
            vmax: float | None = None, origin: str = "upper") -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = np.asarray(matrix, dtype=float)
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    im = ax.imshow(np.ma.masked_invalid(m), cmap=cmap, vmax=vmax, aspect="auto", origin=origin)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def line_plot(xs, series: dict[str, list[float]], path: str, title: str, xlabel: str, ylabel: str,
              bar: bool = False) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    for label, ys in series.items():
        if bar:
            ax.bar(xs, ys, label=label)
        else:
            ax.plot(xs, ys, marker="o", ms=3, label=label)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
