"""Deciding the readout of an HC / native-mHC release from evidence, when its config does not record it.

The study's fork folds the n residual streams before the LM head with a "sum" collapse whose meaning changed across
revisions of its ``nn/transformer/model.py`` (DepthBench, arXiv 2609.32534): older revisions apply the LM head's
norm to each stream and sum the normalised streams (depthbench ``sum_norm``), the newest sums the streams and then
applies the head's norm (``sum``). ``config.json`` records ``collapse: "auto"`` in both, so the checkpoint itself
has to tell: :func:`decide_readout` builds the converted model under each candidate readout and measures its LM loss
on a built-in sample of plain English text (``readout_sample.txt``, about 4 KB, read with ``importlib.resources``)
tokenized with the release's own tokenizer.

The rule (:func:`choose`): with V the vocabulary size, the better readout is taken when

* its loss is at least :data:`TRAINED_GAP_NATS` (1 nat/token) below ln V, the loss of a uniform guess: the
  checkpoint has learned to predict text, so its readout is the one it was trained with; and
* the other readout's loss is at least :data:`READOUT_MARGIN_NATS` (0.1 nat/token) higher.

Otherwise the evidence is not clear-cut and the conversion stops, asking for ``--readout sum|sum_norm``
(``readout=`` in Python). Why these margins: the two readouts differ by the scale of the final state (up to n = 4)
and, once the streams have diverged, by its direction; under the wrong one a trained model's loss rises by tenths of
a nat to nats per token (tests/hub/test_readout.py: tiny models of the fork trained for 30 steps on other text than
the sample, 0.47 to 4.0 nats; docs/hub.md has the table), whereas an untrained checkpoint (step 0) predicts almost
uniformly under its better readout, within a small fraction of a nat of ln V, which the first condition refuses (the
temperature alone may separate the two readouts there: 0.11 nat in that test). 0.1 nat/token over the sample's
hundreds of tokens is far above the noise of such a mean and below what a trained model shows. Both figures are
logged and recorded, with the choice, in ``config.json`` (``hc_readout_evidence`` / ``mhc_readout_evidence``) and in
the model card.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable
from typing import Any

from depthbench.hub.translators import ConversionError, Translator

logger = logging.getLogger(__name__)

SAMPLE = "readout_sample.txt"
TRAINED_GAP_NATS = 1.0
READOUT_MARGIN_NATS = 0.1
#: Longest window scored at once (tokens), below the model's context length.
WINDOW = 512


def sample_text() -> str:
    """The built-in English sample (package data of ``depthbench.hub``)."""
    from importlib import resources

    return resources.files("depthbench.hub").joinpath(SAMPLE).read_text(encoding="utf-8")


def load_tokenizer(tokenizer_dir: str | None):
    """The release's tokenizer (``AutoTokenizer`` from its ``tokenizer/`` folder), or ``None``."""
    if not tokenizer_dir:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(tokenizer_dir)
    except (OSError, ValueError) as exc:
        raise ConversionError(f"{tokenizer_dir}: the release's tokenizer could not be loaded ({exc})") from None


def sample_ids(tokenizer, vocab_size: int) -> list[int]:
    """The sample's token ids under ``tokenizer`` (no special tokens); every id must fit the model's vocabulary."""
    ids = list(tokenizer(sample_text(), add_special_tokens=False)["input_ids"])
    if len(ids) < 2 or max(ids) >= vocab_size:
        raise ConversionError(f"the release's tokenizer does not fit the checkpoint (the sample has {len(ids)} "
                              f"tokens, ids up to {max(ids, default=-1)}, vocabulary {vocab_size})")
    return ids


def mean_loss(model, ids: list[int], window: int) -> float:
    """Mean next-token cross-entropy (nats/token) of ``model`` over ``ids``, in windows of ``window`` tokens."""
    import torch

    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(ids) - 1, window):
            chunk = torch.tensor([ids[start:start + window + 1]])
            if chunk.shape[1] < 2:
                break
            out = model(chunk[:, :-1], use_cache=False)
            loss = torch.nn.functional.cross_entropy(out.logits[0].float(), chunk[0, 1:], reduction="sum")
            total, count = total + float(loss), count + chunk.shape[1] - 1
    return total / count


def choose(losses: dict[str, float], vocab_size: int) -> str | None:
    """The readout the evidence picks (module docstring), or ``None`` when it is not clear-cut."""
    ranked = sorted(losses, key=losses.get)
    best, runner_up = ranked[0], ranked[1]
    trained = losses[best] <= math.log(vocab_size) - TRAINED_GAP_NATS
    separated = losses[runner_up] - losses[best] >= READOUT_MARGIN_NATS
    return best if trained and separated else None


def _rule(vocab_size: int) -> str:
    return (f"lowest loss, if at least {TRAINED_GAP_NATS} nat/token below ln V = {math.log(vocab_size):.4f} and at "
            f"least {READOUT_MARGIN_NATS} nat/token below the other readout")


def decide_readout(translator: Translator, fields: dict[str, Any], readout: str | None,
                   tokenizer: Callable[[], Any], build: Callable[[dict[str, Any]], Any],
                   report: Callable[[str], None] = logger.info) -> dict | None:
    """Fill ``fields[translator.readout_field]`` when the checkpoint's config left it undecided (``None``): the
    user's ``readout``, else the evidence of :func:`choose` on models made by ``build(fields)`` with the release's
    tokenizer (``tokenizer()``, ``None`` when there is none); both losses go to ``report`` (default: this module's
    logger at INFO, as transformers reports what it loads; ``depthbench convert`` prints the notes). Returns the
    evidence record (also stored in the config as ``<field>_evidence``), or ``None`` when the config decided."""
    field = translator.readout_field
    if field is None or fields.get(field) is not None:
        if readout is not None:
            why = (f"config.json records its readout ({field}={fields[field]!r})" if field
                   else "architecture has no stream readout")
            raise ConversionError(f"--readout (readout=) applies only to HC / mHC checkpoints whose config.json "
                                  f"leaves the readout open; this checkpoint's {why}")
        return None
    choices = translator.readout_choices
    if readout is not None:
        if readout not in choices:
            raise ConversionError(f"--readout {readout!r} is not one of {', '.join(choices)}")
        evidence = {"chosen": readout, "decided_by": "--readout (readout=)"}
    else:
        evidence = _measure(field, choices, fields, tokenizer(), build, report)
    fields[field] = evidence["chosen"]
    fields[f"{field}_evidence"] = evidence
    return evidence


def _measure(field: str, choices: tuple[str, ...], fields: dict[str, Any], tokenizer,
             build: Callable[[dict[str, Any]], Any], report: Callable[[str], None]) -> dict:
    options = " | ".join(choices)
    if tokenizer is None:
        raise ConversionError(f"the readout of this checkpoint is not recorded in its config.json, and deciding it "
                              f"from evidence needs the release's tokenizer (tokenizer/ next to stepN/, or "
                              f"--tokenizer); or choose it: --readout {options} (readout= in Python)")
    vocab = fields["vocab_size"]
    ids = sample_ids(tokenizer, vocab)
    window = min(WINDOW, fields["max_position_embeddings"])
    losses = {}
    for choice in choices:
        losses[choice] = mean_loss(build({**fields, field: choice}).eval(), ids, window)
    figures = ", ".join(f"{c} {losses[c]:.4f}" for c in choices)
    report(f"readout evidence ({field}): loss on the built-in sample ({len(ids) - 1} tokens) {figures} nats/token "
           f"(uniform guess {math.log(vocab):.4f})")
    chosen = choose(losses, vocab)
    if chosen is None:
        raise ConversionError(f"the readout of this checkpoint cannot be decided from evidence: on the built-in "
                              f"sample ({len(ids) - 1} tokens) the loss is {figures} nats/token, uniform guess "
                              f"ln V = {math.log(vocab):.4f}; the rule is: {_rule(vocab)} (an untrained checkpoint "
                              f"never passes it). Choose it: --readout {options} (readout= in Python); the study's "
                              f"newest code revision uses sum, older ones sum_norm")
    report(f"readout evidence ({field}): {chosen}")
    digest = hashlib.sha256(sample_text().encode("utf-8")).hexdigest()[:16]
    return {"chosen": chosen, "decided_by": "evidence", "loss_nats_per_token": losses, "tokens": len(ids) - 1,
            "uniform_loss": math.log(vocab), "rule": _rule(vocab), "sample": f"depthbench/hub/{SAMPLE} sha256:{digest}"}
