"""Shared by the analysis tests: tiny models with trained-looking weights, the windows they are analysed on,
and the metric runner.
"""

from __future__ import annotations

import numpy as np
import torch

import depthbench
from depthbench.analysis import analyze
from depthbench.analysis.common import AnalysisContext
from depthbench.analysis.sampling import WindowSpec
from depthbench.analysis.state import token_losses

SHAPE = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


WINDOWS = np.random.default_rng(0).integers(0, 96, size=(4, 16))


def build(arch: str, seed: int = 0, **extra) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = depthbench.build_model(arch, **SHAPE, **extra).eval()
    # trained-looking, not init-symmetric weights: perturb everything (special inits would make metrics trivial)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def llama(seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(**SHAPE, tie_word_embeddings=False)
    return LlamaForCausalLM(cfg).eval()


def ctx_for(model, batched: bool = True, windows=WINDOWS, **kw) -> AnalysisContext:
    spec = WindowSpec(num_samples=len(windows), seq_len=windows.shape[1])
    return AnalysisContext(model, windows, spec, micro_batch_size=2, batched=batched, progress=False, **kw)


def run(model, metric, batched=True, **options):
    return analyze(model, WINDOWS, [metric], micro_batch_size=2, batched=batched, progress=False,
                   options={metric: options})[metric]


def state_snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def mean_loss(model, ids) -> float:
    with torch.no_grad():
        return float(token_losses(model(input_ids=ids).logits.float(), ids).mean())


IDS = torch.from_numpy(WINDOWS)


#: Enough windows for the usefulness fit of every test model (HC: D = 4 * 32, fitted on 12 windows = 192 tokens).
MANY_WINDOWS = np.random.default_rng(1).integers(0, 96, size=(24, 16))
