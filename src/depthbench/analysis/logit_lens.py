"""Logit lens (arXiv 2609.32534, layer analyses; nostalgebraist 2020) through each architecture's own readout.

For every state l = 0..L the stream is decoded the way the model decodes its last one (``Wiring.lens_hidden``: the
wiring's exit, i.e. collapse + final norm for hyper-connections with whatever readout the checkpoint uses; the next
consumer's raw depth mix + final norm for attention residuals; the final norm for a plain Llama), then the LM head:
``p_l = softmax(W_out h_l)``. Over all next-token positions: ``early_exit_ce`` = CE(p_l, next token),
``kl_to_final`` = KL(p_L || p_l) with p_L the model's actual output distribution, ``top5_overlap`` =
|top5(p_l) ∩ top5(p_L)| / 5. The last state reproduces the model's output exactly, so its KL is 0 for every
architecture (the reference decoded Norm(sum of streams) for HC while the model output sum of Norm(stream)).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .common import AnalysisContext, MetricResult

METRIC_ID = "logit_lens"


def run(ctx: AnalysisContext) -> MetricResult:
    a = ctx.adapter
    L = a.num_layers
    ce, kl, top5 = np.zeros(L + 1), np.zeros(L + 1), np.zeros(L + 1)
    count = 0
    max_abs_final = 0.0
    for trace in ctx.traces("logit lens"):
        ids = trace.input_ids
        target = ids[:, 1:].flatten()
        with torch.no_grad(), ctx.autocast():
            final = a.head(a.lens_hidden(trace.output))[:, :-1].flatten(0, 1)
            max_abs_final = max(max_abs_final, float((final - trace.logits[:, :-1].flatten(0, 1)).abs().max()))
            logp_final = F.log_softmax(final, dim=-1)
            top_final = final.topk(5, dim=-1).indices
            streams = list(trace.inputs) + [trace.output]
            for blk, stream in enumerate(streams):
                logits = a.head(a.lens_hidden(stream))[:, :-1].flatten(0, 1)
                logp = F.log_softmax(logits, dim=-1)
                ce[blk] += float(F.nll_loss(logp, target, reduction="sum"))
                kl[blk] += float(F.kl_div(logp, logp_final, log_target=True, reduction="sum"))
                top = logits.topk(5, dim=-1).indices
                top5[blk] += float((top.unsqueeze(-1) == top_final.unsqueeze(-2)).any(-1).float().sum() / 5)
        count += target.numel()
    ce, kl, top5 = ce / count, kl / count, top5 / count
    rows = [{"state": blk, "early_exit_ce": ce[blk], "kl_to_final": kl[blk], "top5_overlap": top5[blk]}
            for blk in range(L + 1)]
    values = {"early_exit_ce": ce, "kl_to_final": kl, "top5_overlap": top5, "final_loss": ce[-1],
              "final_logits_max_abs_diff": max_abs_final}
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    v = result.values
    xs = list(range(len(v["early_exit_ce"])))
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
    for ax, key in zip(axes, ("early_exit_ce", "kl_to_final", "top5_overlap")):
        ax.plot(xs, v[key], marker="o", ms=3)
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("state l")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
