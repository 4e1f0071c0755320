"""The optimizer and its schedule: parameter groups (no-weight-decay parameters, per-architecture learning-rate /
epsilon rules) and the study's LR schedule (:func:`lr_lambda`).

The trainer builds its AdamW from :func:`param_groups`::

    groups = param_groups(model, lr=2e-3, weight_decay=0.1, eps=1e-8, betas=(0.9, 0.95))
    optimizer = torch.optim.AdamW(groups)

Two things decide a parameter's group:

1. Weight decay: every name in ``model.no_weight_decay_names()`` (norm gains, biases, and what each architecture
   lists in ``no_decay``) gets ``weight_decay=0``; all other parameters are decayed.
2. Architecture rules: a config may define ``optimizer_rules() -> list[dict]``, an ordered list of
   ``{"name": str, "pattern": regex, "lr": float, "weight_decay": float, "eps": float}``. The first rule whose
   ``pattern`` is found (``re.search``) in a parameter's full name applies, and its numbers multiply the base
   ``lr``, ``weight_decay`` and ``eps``; unmatched parameters keep multiplier 1. The depth-scaled Pre-LN
   parametrizations (``depth_mup``, ``completep``) use this for their depth-only / depth-width muP rules
   (``lr x m_L^(a-1)``, ``eps x m_L^(-a)`` on every block parameter, ...); any architecture can plug in the same way
   without touching this file. The rule data lives in the config because the config ships with the checkpoint.
"""

from __future__ import annotations

import math
import re
from typing import Any

from torch import nn


def _no_decay_names(model: nn.Module) -> set[str]:
    """The model's own no-decay list, or (for a foreign model) every parameter with fewer than 2 dims."""
    names = getattr(model, "no_weight_decay_names", None)
    if callable(names):
        return set(names())
    return {name for name, p in model.named_parameters() if p.ndim < 2}


def optimizer_rules(model: nn.Module) -> list[dict]:
    """The architecture's optimizer rules (``model.config.optimizer_rules()``), ``[]`` when it declares none."""
    rules = getattr(getattr(model, "config", None), "optimizer_rules", None)
    if not callable(rules):
        return []
    rules = list(rules())
    for rule in rules:
        missing = {"name", "pattern", "lr", "weight_decay", "eps"} - set(rule)
        if missing:
            raise ValueError(f"optimizer rule {rule!r} lacks the keys {sorted(missing)}")
    return rules


def param_groups(model: nn.Module, lr: float, weight_decay: float, eps: float = 1e-8, *, decay_all: bool = False,
                 **kw: Any) -> list[dict]:
    """Parameter groups for ``torch.optim.AdamW`` (or any optimizer taking ``lr``, ``weight_decay`` and ``eps``).

    Args:
        model: The model (a depthbench causal LM, its base model, or any ``nn.Module``); frozen parameters
            (``requires_grad=False``) are left out.
        lr: Base learning rate.
        weight_decay: Base weight decay of decayed parameters.
        eps: Base Adam epsilon.
        decay_all: Give the no-decay groups the base weight decay too (the reference code's decay-everything
            recipe, ``optim.decay_norms_and_biases=true``); the groups stay as they are.
        **kw: Extra options copied into every group (for example ``betas=(0.9, 0.95)``).

    Returns:
        One dict per (rule, decayed or not) combination that has parameters, in order of first appearance, with
        keys ``params`` (list of tensors), ``lr``, ``weight_decay``, ``eps``, the ``kw`` options, and two labels
        the optimizer carries along untouched: ``name`` (``"<rule>"`` or ``"<rule>/no_decay"``; ``"default"``
        where no rule applies) and ``param_names`` (the full parameter names, same order as ``params``). Each
        group's ``lr`` is the base ``lr`` times the rule's multiplier, so a learning-rate schedule that scales
        every group's initial ``lr`` keeps the ratios.
    """
    no_decay = _no_decay_names(model)
    rules = optimizer_rules(model)
    compiled = [(rule, re.compile(rule["pattern"])) for rule in rules]
    default = {"name": "default", "lr": 1.0, "weight_decay": 1.0, "eps": 1.0}
    groups: dict[tuple[str, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        rule = next((r for r, pattern in compiled if pattern.search(name)), default)
        decayed = name not in no_decay
        key = (rule["name"], decayed)
        if key not in groups:
            groups[key] = {
                "name": rule["name"] if decayed else f"{rule['name']}/no_decay",
                "params": [],
                "param_names": [],
                "lr": lr * rule["lr"],
                "weight_decay": weight_decay * rule["weight_decay"] if decayed else weight_decay if decay_all else 0.0,
                "eps": eps * rule["eps"],
                **kw,
            }
        groups[key]["params"].append(param)
        groups[key]["param_names"].append(name)
    return list(groups.values())


def lr_lambda(warmup: int, total: int, min_ratio: float):
    """LR multiplier for optimizer step ``s`` (0-based): ``(s+1)/warmup`` during warmup, then cosine from 1 at
    ``s = warmup`` to ``min_ratio`` at the last step ``s = total - 1``."""

    def factor(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        progress = min(max((s - warmup) / max(total - 1 - warmup, 1), 0.0), 1.0)
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor
