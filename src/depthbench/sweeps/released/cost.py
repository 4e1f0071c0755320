"""What a ``depthbench released eval`` selection costs, printed before anything is downloaded: the download size,
the parameters and the forward FLOPs per 10^9 held-out tokens.

* **Download**: per release, its final checkpoint's ``model_and_optim/`` as the Hub listing gives it (``depthbench
  released sync``); without a listing, estimated at 6 bytes per parameter (bf16 weights plus AdamW's two moments in
  bf16: each rank's ``.distcp`` file mixes model and optimizer tensors, so the whole folder is fetched).
* **Parameters**: depthbench's count of the entry's shape (``depthbench.shapes``, the architecture's extra
  parameters included), or of the Hub config's shape.
* **FLOPs**: the forward pass, 2 x (non-embedding parameters) per token plus attention's 2 x L x n_ctx x d per
  token (QK^T and AV, causal, at the window length), times 10^9 tokens.
"""

from __future__ import annotations

from typing import Any

BYTES_PER_PARAMETER = 6  # bf16 weights + two bf16 AdamW moments


def target_cost(target, seq_len: int = 2048) -> dict[str, Any]:
    """``{params, download_bytes, download_source, flops_per_1e9_tokens}`` of one target (``None`` where the shape
    is not known)."""
    release = target.release
    shape = release.grid_shape() if release else None
    if shape is None and target.grid:
        from depthbench.shapes import get_grid

        shape = get_grid(target.grid).shape(target.depth)
    if shape is None:
        return {"params": None, "download_bytes": release.download_bytes if release else None,
                "download_source": "Hub listing" if release and release.download_bytes else None,
                "flops_per_1e9_tokens": None}
    counts = shape.parameter_counts(target.arch)
    params = counts["total"]
    non_embedding = params - counts["embedding"]
    flops = (2 * non_embedding + 2 * shape.num_layers * seq_len * shape.hidden_size) * 1e9
    listed = release.download_bytes if release else None
    return {"params": params, "download_bytes": listed if listed else params * BYTES_PER_PARAMETER,
            "download_source": "Hub listing" if listed else "estimated", "flops_per_1e9_tokens": flops}


def selection_cost(targets, seq_len: int = 2048) -> dict[str, Any]:
    """The sums over ``targets`` and how many download sizes were estimated."""
    costs = [target_cost(t, seq_len) for t in targets]
    return {"releases": len(targets), "params": sum(c["params"] or 0 for c in costs),
            "download_bytes": sum(c["download_bytes"] or 0 for c in costs),
            "estimated": sum(c["download_source"] == "estimated" for c in costs),
            "unknown": sum(c["download_bytes"] is None for c in costs),
            "flops_per_1e9_tokens": sum(c["flops_per_1e9_tokens"] or 0 for c in costs), "seq_len": seq_len}


def format_cost(cost: dict[str, Any]) -> str:
    """One line: ``N release(s): X GB to download (...), Y B parameters, Z PFLOP per 10^9 held-out tokens``."""
    how = ("as the Hub listing gives it" if not cost["estimated"] else
           f"{cost['estimated']} of them estimated at {BYTES_PER_PARAMETER} bytes per parameter (run `depthbench "
           "released sync` for the listed sizes)")
    unknown = f", {cost['unknown']} of unknown size" if cost["unknown"] else ""
    return (f"{cost['releases']} release(s): {cost['download_bytes'] / 1e9:.1f} GB to download ({how}{unknown}), "
            f"{cost['params'] / 1e9:.2f}B parameters (depthbench's count), "
            f"{cost['flops_per_1e9_tokens'] / 1e15:,.0f} PFLOP forward per 10^9 held-out tokens "
            f"({cost['seq_len']}-token windows)")
