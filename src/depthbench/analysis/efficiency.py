"""Efficiency table (arXiv 2609.32534, Fig. 11): prefill FLOPs, KV-cache bytes and peak memory per token at a given
sequence length, from the config and measured.

* FLOPs, config: ``2 * N_matmul * T`` (every weight matrix but the embedding, once per token) plus attention
  ``2 * 2 * L * T^2 * H * hd`` (scores and values, full square as the dense kernels compute it); measured: counted by
  ``torch.utils.flop_counter.FlopCounterMode`` on one prefill (architecture extras such as HC mixing, AttnRes depth
  attention, MoDA depth keys included).
* KV cache, config: ``2 * L * T * H_kv * hd * bytes``; measured: bytes of every tensor in the cache after a prefill
  with ``use_cache=True``.
* Peak memory per token: CUDA ``max_memory_allocated`` growth over the prefill / T; on CPU the growth of the
  process's peak RSS (``/proc/self/status`` VmHWM, reset first), which is noisy on a shared machine.
"""

from __future__ import annotations

import torch

from .common import AnalysisContext, MetricResult

METRIC_ID = "efficiency"


def config_estimates(model, seq_len: int, bytes_per_value: int = 2) -> dict:
    cfg = model.config
    L, heads = cfg.num_hidden_layers, cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    embed = model.get_input_embeddings().weight.numel()
    matmul = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2) - embed
    flops = 2 * matmul * seq_len + 4 * L * seq_len**2 * heads * hd
    return {"prefill_flops": flops, "kv_cache_bytes": 2 * L * seq_len * kv * hd * bytes_per_value,
            "kv_bytes_per_value": bytes_per_value}


def _cache_bytes(cache) -> int:
    seen, total = set(), 0

    def visit(obj, depth=0):
        nonlocal total
        if depth > 4 or obj is None:
            return
        if torch.is_tensor(obj):
            if id(obj) not in seen:
                seen.add(id(obj))
                total += obj.numel() * obj.element_size()
            return
        if isinstance(obj, (list, tuple)):
            for o in obj:
                visit(o, depth + 1)
        elif hasattr(obj, "__dict__"):
            for o in vars(obj).values():
                visit(o, depth + 1)

    visit(cache)
    return total


def measure(model, seq_len: int) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    device = next(model.parameters()).device
    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), device=device)
    out: dict = {}
    with torch.no_grad():
        counter = FlopCounterMode(display=False)
        with counter:
            model(input_ids=ids, use_cache=False)
        out["prefill_flops"] = int(counter.get_total_flops())
        result = model(input_ids=ids, use_cache=True)
        cache = getattr(result, "cache", None) or getattr(result, "past_key_values", None)
        out["kv_cache_bytes"] = _cache_bytes(cache)
        out["kv_cache_dtype_bytes"] = next(model.parameters()).element_size()
        del result, cache
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            model(input_ids=ids, use_cache=False)
            torch.cuda.synchronize()
            out["peak_bytes_per_token"] = (torch.cuda.max_memory_allocated() - base) / seq_len
            out["peak_method"] = "cuda max_memory_allocated"
        else:
            from depthbench.procfs import proc_status_kb, reset_peak_rss

            if reset_peak_rss():
                before = proc_status_kb("VmRSS")
                model(input_ids=ids, use_cache=False)
                out["peak_bytes_per_token"] = max(0, proc_status_kb("VmHWM") - before) * 1024 / seq_len
                out["peak_method"] = "peak RSS growth (VmHWM)"
    return out


def run(ctx: AnalysisContext, seq_len: int = 4096) -> MetricResult:
    model = ctx.model
    est = config_estimates(model, seq_len)
    meas = measure(model, seq_len)
    params = sum(p.numel() for p in model.parameters())
    rows = [
        {"quantity": "prefill FLOPs", "config": est["prefill_flops"], "measured": meas["prefill_flops"]},
        {"quantity": "KV cache bytes (bf16 config / model dtype measured)", "config": est["kv_cache_bytes"],
         "measured": meas["kv_cache_bytes"] * 2 // meas["kv_cache_dtype_bytes"]},
        {"quantity": "peak memory bytes per token", "config": None, "measured": meas.get("peak_bytes_per_token")},
    ]
    values = {"seq_len": seq_len, "parameters": params, "config": est, "measured": meas}
    return MetricResult(METRIC_ID, values, rows)


def plot(result: MetricResult, path: str) -> bool:
    return False
