"""``depthbench.upcycle.upcycle``: a pretrained Llama-family model as a depthbench model of any registered
architecture, with a measured start.

    from depthbench.upcycle import upcycle
    result = upcycle("HuggingFaceTB/SmolLM2-135M", "hc", grow_depth=6)   # a model, a local folder or a Hub id
    result.start, result.deviation          # "exact", 0.0 (max |logits - source's| / max |source's| on the sample)
    result.model                            # the depthbench model (eval mode)
    result.save("smollm2-hc")               # an ordinary depthbench checkpoint folder (remote code, card, tokenizer)

What happens (each step refuses with a one-line :class:`~depthbench.upcycle.sources.UpcycleError` on bad input):

1. the source is loaded in fp32 and its family checked (:mod:`depthbench.upcycle.sources`); a local GGUF file is
   parsed once (one ``gguf.GGUFReader`` serves transformers' config, weight and tokenizer loaders, the license and
   the sha256);
2. its config becomes depthbench backbone fields, plus the architecture's own start fields
   (``config_class.upcycle_fields``) and the caller's ``overrides`` (e.g. a bounded start's knob);
3. every source tensor is mapped by name (checked against the architecture's names and shapes, read from a model
   on the meta device). With ``grow_depth=K`` K new blocks are placed among the source's (``grow_mode``); their
   output projections (``o_proj``, ``down_proj``) are zero: under every additive design such a block adds nothing
   at step 0. The architecture's hook ``config.upcycle_state`` adjusts the tensors where its start needs it (LNS
   folds its depth scale into the norm gains);
4. the source, run by transformers itself, gives its logits and loss on a built-in English sample (tokenized with
   the source's tokenizer; seeded random tokens when there is none) and, for a bounded start, what the bound needs
   (``upcycle_norm_factor``: the source run again with the start's per-norm factors); then the source is dropped;
5. the upcycled model is built by transformers' loading path (``from_pretrained(None, config=..., state_dict=...)``:
   on the meta device, the mapped tensors put in place by reference, only the missing ones -- the architecture's
   extra parameters, the new blocks' other weights -- allocated and given the architecture's own init, seeded; a
   caller's model object is cloned first, never aliased);
6. the start is measured: the relative logits deviation from the source's and the step-0 loss change. A start the
   architecture declares exact but that deviates by more than :data:`EXACT_TOLERANCE`, or a bounded one outside
   its bound, is an error (nothing is returned that claims more than it holds); a function-changing start needs
   ``allow_function_change=True``.
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

from depthbench.upcycle.sources import (
    FAMILIES,
    OUTPUT_PROJECTIONS,
    UpcycleError,
    backbone_fields,
    block_map,
    family_of,
    map_state,
)

#: Relative logits deviation an exact start may show (fp32 rounding of a different summation order).
EXACT_TOLERANCE = 1e-5
#: Longest stretch of the built-in sample the start is measured on (tokens).
SAMPLE_TOKENS = 512
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class SourceInfo:
    """Where the upcycled weights come from (the card names all of it)."""

    name: str
    family: str
    revision: str | None = None
    license: str | None = None
    gguf_file: str | None = None


@dataclass
class UpcycleResult:
    """The upcycled model and what was measured about its start.

    Attributes:
        model: The depthbench causal LM (eval mode; fp32 unless ``dtype`` was given).
        arch: Registry id of its architecture.
        start: ``"exact"``, ``"bounded"`` or ``"changes"`` (the architecture's ``upcycle_start``).
        deviation: Measured ``max |logits - source logits| / max |source logits|`` on the sample (fp32).
        bound: The stated bound on ``deviation`` of a bounded start (``None`` otherwise).
        loss_source / loss_upcycled: Mean next-token cross-entropy (nats/token) on the sample.
        layout: Source block of every upcycled block (``None`` = new block).
        source: :class:`SourceInfo`.
        tokenizer / generation_config: The source's, carried into :meth:`save` (``None`` when it has none).
        report: JSON-ready summary of all of the above (written as ``upcycle.json`` by :meth:`save`).
    """

    model: object
    arch: str
    start: str
    deviation: float
    bound: float | None
    loss_source: float
    loss_upcycled: float
    layout: list
    source: SourceInfo
    sample_tokens: int
    sample: str
    knob: str | None = None
    tokenizer: object = None
    generation_config: object = None
    report: dict = field(default_factory=dict)

    @property
    def loss_change(self) -> float:
        """``loss_upcycled - loss_source`` (nats/token) at step 0."""
        return self.loss_upcycled - self.loss_source

    def save(self, output_dir: str, overwrite: bool = False) -> str:
        """Write the model as a depthbench checkpoint folder; see :func:`depthbench.upcycle.checkpoint.save`."""
        from depthbench.upcycle.checkpoint import save

        return save(self, output_dir, overwrite=overwrite)


# ================================================================================================ loading
def load_source(source, revision: str | None = None, gguf_file: str | None = None, depth: int | None = None):
    """``(model fp32 eval, tokenizer or None, SourceInfo)`` for a model object, a local folder or a Hub id. For a
    folder or Hub id, a requested ``depth`` below the source's is refused from its config, before any weights load
    (a GGUF file's depth is known only once it is parsed, and a model object loads nothing: :func:`upcycle` checks
    those)."""
    import torch
    from transformers import AutoModelForCausalLM, PreTrainedModel

    gguf_facts = None  # (revision, license) read from a local GGUF file
    if isinstance(source, PreTrainedModel):
        model = source
        name = getattr(source.config, "_name_or_path", "") or type(source).__name__
        folder = name if os.path.isdir(name) else None
        tokenizer = None
    else:
        if not isinstance(source, str) or not source:
            raise UpcycleError(f"source {source!r} is neither a model, a local folder nor a Hub model id")
        name, folder = source, source if os.path.isdir(source) else None
        kwargs = dict(dtype=torch.float32, revision=revision)
        if gguf_file:
            kwargs["gguf_file"] = gguf_file
        if not gguf_file:  # a GGUF file is parsed once per read: its family is checked on the loaded model
            _check_architectures(source, revision, gguf_file, depth)
        gguf_path = os.path.join(folder, gguf_file) if folder and gguf_file else None
        with _one_gguf_parse(gguf_path) as reader:
            try:
                model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
            except ValueError as exc:  # transformers: "Unrecognized configuration class ... for AutoModelForCausalLM"
                raise UpcycleError(f"{source!r} is not a causal language model transformers can load: "
                                   f"{str(exc).splitlines()[0]}") from None
            except OSError as exc:
                raise UpcycleError(f"cannot load {source!r}: {str(exc).splitlines()[0]}") from None
            tokenizer = _tokenizer(source, revision, gguf_file)
            if reader is not None:
                gguf_facts = (f"sha256:{hashlib.sha256(memoryview(reader.data)).hexdigest()}", _gguf_license(reader))
    if any(p.dtype != torch.float32 for p in model.parameters()):
        model = model.float()  # (a dequantised GGUF model is fp32 already, and refuses .float())
    model = model.eval()
    family_name, _ = family_of(model)
    info = SourceInfo(name=_display_name(name, gguf_file), family=family_name)
    if gguf_facts is not None:  # the revision is the file's sha256, the license its metadata's (same mapping)
        info.revision, info.license = gguf_facts
    else:
        info.revision, info.license = _revision(model, revision), _license(folder)
    info.gguf_file = os.path.basename(gguf_file) if gguf_file else None
    return model, tokenizer, info


@contextmanager
def _one_gguf_parse(path: str | None):
    """Parse a local GGUF file once. transformers' config, weight and tokenizer loaders each construct a
    ``gguf.GGUFReader`` of the file (about 2 s each for SmolLM2's 49k-token vocabulary on an idle core): inside this
    block they all receive the one reader built here (read-only: a memory map of the file and its parsed fields),
    and the caller reads the license and the sha256 from it too. The weight loader also rebuilds gguf's tensor-name
    table (``gguf.get_tensor_name_map``, a pure function of the architecture and depth) once per submodule, ~400
    times for SmolLM2: inside the block it is memoised. Yields ``None`` (and changes nothing) without a local GGUF
    file."""
    if path is None or not os.path.isfile(path):
        yield None
        return
    import functools

    import gguf

    real_reader, real_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    reader = real_reader(path)
    target = os.path.realpath(path)

    def shared(p, *args, **kwargs):
        same = not args and kwargs.get("mode", "r") == "r" and os.path.realpath(os.fspath(p)) == target
        return reader if same else real_reader(p, *args, **kwargs)

    gguf.GGUFReader, gguf.get_tensor_name_map = shared, functools.lru_cache(maxsize=None)(real_name_map)
    try:
        yield reader
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_name_map


def _check_architectures(source: str, revision, gguf_file, depth: int | None = None) -> None:
    """Refuse, before loading any weights, a source whose config names model classes that are not causal LMs
    (``AutoModelForCausalLM`` would put a fresh random head on, e.g., a BERT encoder) or another family, or one
    deeper than the requested ``depth``."""
    from transformers import AutoConfig

    try:
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        config = AutoConfig.from_pretrained(source, revision=revision, **extra)
    except (OSError, ValueError) as exc:
        raise UpcycleError(f"cannot load {source!r}: {str(exc).splitlines()[0]}") from None
    names = list(getattr(config, "architectures", None) or [])
    if names and not any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names):
        raise UpcycleError(f"{source!r} is not a causal language model (its config names {', '.join(names)}); "
                           f"upcycle reads {', '.join(FAMILIES)}")
    if names and not any(n in FAMILIES for n in names):
        raise UpcycleError(f"unsupported source family {names[0]} (model_type {config.model_type!r}); "
                           f"supported: {', '.join(FAMILIES)}")
    if isinstance(getattr(config, "num_hidden_layers", None), int):
        growth_to(depth, config.num_hidden_layers)


def _tokenizer(source: str, revision, gguf_file):
    from transformers import AutoTokenizer

    try:
        kwargs = {"gguf_file": gguf_file} if gguf_file else {}
        return AutoTokenizer.from_pretrained(source, revision=revision, **kwargs)
    except Exception:  # a source without tokenizer files: measured on seeded random tokens, none carried
        return None


def _display_name(name: str, gguf_file) -> str:
    if os.path.isdir(name):
        return os.path.basename(os.path.normpath(name)) + (f" ({os.path.basename(gguf_file)})" if gguf_file else "")
    return name


def _revision(model, revision) -> str | None:
    """The Hub commit the weights came from, else the requested revision (a GGUF file's is its sha256)."""
    return getattr(model.config, "_commit_hash", None) or revision


def _gguf_license(reader) -> str | None:
    """``general.license`` of a GGUF file's metadata (``None`` when it has none)."""
    field_ = reader.fields.get("general.license")
    try:
        return str(field_.contents()) if field_ is not None else None
    except Exception:
        return None


def _license(folder) -> str | None:
    """The source's license from its model card's YAML header."""
    card = os.path.join(folder, "README.md") if folder else None
    if card and os.path.isfile(card):
        from huggingface_hub import ModelCard

        try:
            return ModelCard.load(card).data.license
        except Exception:
            return None
    return None


# ================================================================================================ measuring
def sample_ids(tokenizer, vocab_size: int):
    """The built-in English sample (``depthbench/hub/readout_sample.txt``) as ``[1, T]`` ids, at most
    :data:`SAMPLE_TOKENS`; without a tokenizer, 2 x 64 seeded random ids (``(ids, description)``)."""
    import torch

    if tokenizer is not None:
        from importlib import resources

        text = resources.files("depthbench.hub").joinpath("readout_sample.txt").read_text(encoding="utf-8")
        ids = tokenizer(text, return_tensors="pt").input_ids[:, :SAMPLE_TOKENS]
        if ids.shape[1] >= 16 and int(ids.max()) < vocab_size:  # else not a usable tokenizer of this model
            return ids, "built-in English sample (depthbench/hub/readout_sample.txt)"
    ids = torch.randint(0, vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    return ids, "seeded random tokens (the source has no tokenizer)"


def _logits_and_loss(model, ids):
    """``(logits fp32, mean next-token cross-entropy)``; the loss is taken 128 positions at a time, so no second
    vocabulary-wide copy of the logits is ever held (SmolLM2's are 100 MB on the sample)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits.float()
        flat, labels = logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()
        total = sum(float(torch.nn.functional.cross_entropy(flat[i:i + 128], labels[i:i + 128], reduction="sum"))
                    for i in range(0, labels.numel(), 128))
    return logits, total / labels.numel()


def _relative_deviation(logits, ref_logits) -> float:
    """``max |logits - ref_logits| / max |ref_logits|``, computed in place in ``logits`` (which it consumes)."""
    scale = max(float(ref_logits.max()), -float(ref_logits.min()))  # max |ref_logits| without a copy
    return float(logits.sub_(ref_logits).abs_().max()) / scale


def _norm_positions(layout: list) -> dict[str, int]:
    """Source norm module name -> index of the norm it becomes in the upcycled model (sublayer norms 0 .. 2L-1 in
    order, then the final norm at 2L); a new block's norms have no source norm."""
    out = {"model.norm": 2 * len(layout)}
    for pos, src in enumerate(layout):
        if src is not None:
            out[f"model.layers.{src}.input_layernorm"] = 2 * pos
            out[f"model.layers.{src}.post_attention_layernorm"] = 2 * pos + 1
    return out


def source_pass(source, ids, layout: list):
    """One forward of the source on ``ids``: ``(logits fp32, loss, mean squares)``, the mean squares being the
    smallest per-token mean square of the Pre-LN stream at every norm input of the upcycled model (2 per block,
    then the final norm); a new block (zero outputs) sees the stream its successor sees."""

    seen: dict[str, float] = {}
    hooks = []
    for name, module in source.named_modules():
        if name.endswith(("input_layernorm", "post_attention_layernorm")) or name == "model.norm":
            def hook(mod, args, _name=name):
                seen[_name] = float(args[0].float().pow(2).mean(-1).min())
            hooks.append(module.register_forward_pre_hook(hook))
    try:
        logits, loss = _logits_and_loss(source, ids)
    finally:
        for h in hooks:
            h.remove()
    out: list[float] = []
    for pos, src in enumerate(layout):
        if src is None:
            nxt = next((s for s in layout[pos + 1:] if s is not None), None)
            ms = seen[f"model.layers.{nxt}.input_layernorm"] if nxt is not None else seen["model.norm"]
            out += [ms, ms]
        else:
            out += [seen[f"model.layers.{src}.input_layernorm"], seen[f"model.layers.{src}.post_attention_layernorm"]]
    return logits, loss, out + [seen["model.norm"]]


def rescaled_source_deviation(source, ids, layout: list, config, ref_logits) -> float | None:
    """``max |logits - ref_logits| / max |ref_logits|`` of the source run by transformers with every norm's output
    multiplied per token by the architecture's ``config.upcycle_norm_factor(index, mean_square)`` (computed from
    that norm's own input in this run); ``None`` when the architecture declares no factor. For an architecture whose
    start is exactly "Pre-LN with each norm output rescaled per token" (AttnRes with zero queries), this run computes
    the upcycled model's function with transformers' own modules, so its deviation is the upcycled model's up to
    fp32 rounding."""
    import torch

    positions = _norm_positions(layout)
    probe = torch.ones(1, 1)
    if all(config.upcycle_norm_factor(i, probe) is None for i in positions.values()):
        return None  # no norm is rescaled (e.g. mHC): no second forward
    hooks, applied = [], []
    for name, module in source.named_modules():
        index = positions.get(name)
        if index is None:
            continue

        def hook(mod, args, out, _index=index):
            factor = config.upcycle_norm_factor(_index, args[0].float().pow(2).mean(-1, keepdim=True))
            if factor is None:
                return None
            applied.append(_index)
            return (out.float() * factor).to(out.dtype)
        hooks.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            logits = source(input_ids=ids, use_cache=False).logits.float()
    finally:
        for h in hooks:
            h.remove()
    if not applied:
        return None
    return _relative_deviation(logits, ref_logits)


def build_target(model_class, config, state: dict, seed: int):
    """The upcycled model, built by transformers' loading path: on the meta device, ``state``'s tensors put in
    place (by reference), only the tensors it lacks (the architecture's extra parameters, new blocks' other
    weights, buffers) allocated and initialised by the architecture's own init, seeded; tied weights tied."""
    import torch
    from transformers.utils import logging

    torch.manual_seed(seed)
    verbosity, bar = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()  # "newly initialized" weights are the point here, not a warning
    logging.disable_progress_bar()  # an in-memory state dict: nothing to wait for
    try:
        model = model_class.from_pretrained(None, config=config, state_dict=state, dtype=torch.float32)
    finally:
        logging.set_verbosity(verbosity)
        if bar:
            logging.enable_progress_bar()
    return model.eval()


# ================================================================================================ upcycle
def check_grow_depth(grow_depth) -> int:
    if isinstance(grow_depth, bool) or not isinstance(grow_depth, int) or grow_depth < 0:
        raise UpcycleError(f"grow_depth={grow_depth!r} is not allowed: the number of new blocks must be a "
                           "non-negative integer (0 = no growth)")
    return grow_depth


def check_depth(depth, grow_depth: int) -> int | None:
    """``depth`` (the upcycled model's number of blocks, or ``None``) checked: a positive integer, not given
    together with a ``grow_depth``."""
    if depth is None:
        return None
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UpcycleError(f"depth={depth!r} is not allowed: the upcycled model's number of blocks must be a "
                           "positive integer")
    if grow_depth:
        raise UpcycleError(f"depth={depth} and grow_depth={grow_depth} were both given: give the new depth or the "
                           "number of new blocks, not both")
    return depth


def growth_to(depth: int | None, source_depth: int) -> int:
    """The number of new blocks that takes a ``source_depth``-block model to ``depth`` blocks (0 for ``None``)."""
    if depth is None:
        return 0
    if depth < source_depth:
        raise UpcycleError(f"depth={depth} is below the source's {source_depth} blocks: upcycling keeps every "
                           f"source block and adds new ones, so the depth must be at least {source_depth}")
    return depth - source_depth


def upcycle(source, arch: str, *, grow_depth: int = 0, depth: int | None = None, grow_mode: str = "interleave",
            dtype: str | None = None, allow_function_change: bool = False, overrides: dict | None = None,
            revision: str | None = None, gguf_file: str | None = None, seed: int = 0) -> UpcycleResult:
    """Upcycle ``source`` (a transformers causal LM, a local folder or a Hub id; ``gguf_file`` names a GGUF file
    in the folder, dequantised to fp32) into the registered architecture ``arch``; see the module docstring.

    Args:
        grow_depth: New blocks K (zero output projections); 0 keeps the source's depth.
        depth: The upcycled model's number of blocks instead of ``grow_depth``: the source's depth or more (the
            difference is the number of new blocks).
        grow_mode: ``"interleave"`` (spread evenly between source blocks) or ``"append"`` (after the last one).
        dtype: dtype of the returned model (``float32`` default, ``bfloat16``, ``float16``); measured in fp32.
        allow_function_change: Accept an architecture whose start changes the function (its measured loss change
            is in the result).
        overrides: Config fields of the architecture (e.g. a bounded start's knob ``attnres_mix_eps``).
        seed: Seed of the architecture's init of the new parameters.
    """
    import torch
    from transformers import PreTrainedModel

    from depthbench.registry import get

    try:
        spec = get(arch)
    except ValueError as exc:
        raise UpcycleError(str(exc)) from None
    grow_depth = check_grow_depth(grow_depth)
    depth = check_depth(depth, grow_depth)
    if dtype is not None and dtype not in DTYPES:
        raise UpcycleError(f"dtype={dtype!r} is not allowed: dtype must be one of {', '.join(DTYPES)}")
    config_class = spec.config_class
    start = config_class.upcycle_start
    if start == "changes" and not allow_function_change:
        raise UpcycleError(f"{arch} changes the function at step 0 ({config_class.upcycle_reason}); pass "
                           "--allow-function-change (allow_function_change=True) to upcycle it anyway, or choose an "
                           "exact or bounded architecture (see depthbench upcycle --help)")
    model_src, tokenizer, info = load_source(source, revision=revision, gguf_file=gguf_file, depth=depth)
    fields = backbone_fields(model_src.config, family_of(model_src)[1])
    grow_depth = grow_depth or growth_to(depth, fields["num_hidden_layers"])
    depth = fields["num_hidden_layers"] + grow_depth
    layout = block_map(fields["num_hidden_layers"], grow_depth, grow_mode)
    fields.update(num_hidden_layers=depth, **config_class.upcycle_fields(depth), **(overrides or {}))
    try:
        config = config_class(**fields)
    except (TypeError, ValueError) as exc:
        raise UpcycleError(f"cannot build a {arch} config from the source: {exc}") from None
    owned = not isinstance(source, PreTrainedModel)  # loaded here: its tensors move into the upcycled model
    state, leftover = map_state(model_src.state_dict(), layout, tied=bool(config.tie_word_embeddings))
    if leftover:
        raise UpcycleError(f"{len(leftover)} source tensor(s) have no place in depthbench's backbone: "
                           + ", ".join(leftover[:8]) + (" ..." if len(leftover) > 8 else ""))
    with torch.device("meta"):  # names and shapes only: nothing allocated, nothing initialised
        target = {k: v.shape for k, v in spec.causal_lm_class(config).state_dict().items()}
    new_blocks = {pos for pos, src in enumerate(layout) if src is None}
    for pos in new_blocks:
        for rel in OUTPUT_PROJECTIONS:
            name = f"model.layers.{pos}.{rel}"
            if name in target:
                state[name] = torch.zeros(target[name])
    config.upcycle_state(state, new_blocks)
    wrong = [k for k, v in state.items() if k not in target or target[k] != v.shape]
    if wrong:
        have = tuple(target[wrong[0]]) if wrong[0] in target else "no such tensor"
        raise UpcycleError(f"source tensor {wrong[0]} does not fit the {arch} model (shape "
                           f"{tuple(state[wrong[0]].shape)} vs {have})")

    # The source, run by transformers, first: its logits on the sample (and, for a bounded start, what the bound
    # needs); then it is dropped, and its tensors become the upcycled model's (by reference when loaded here).
    ids, sample = sample_ids(tokenizer, config.vocab_size)
    ref_logits, loss_source, mean_squares = source_pass(model_src, ids, layout)
    bound = None
    if start == "bounded":
        rescaled = rescaled_source_deviation(model_src, ids, layout, config, ref_logits)
        bound = config.upcycle_bound(mean_squares, rescaled)
    generation_config = getattr(model_src, "generation_config", None)
    del model_src
    if not owned:  # never alias the caller's model: training the upcycled one would change it
        state = {k: v.detach().clone() for k, v in state.items()}
    model = build_target(spec.causal_lm_class, config, state, seed)
    del state
    logits, loss_upcycled = _logits_and_loss(model, ids)
    deviation = _relative_deviation(logits, ref_logits)
    del logits, ref_logits
    if start == "exact" and not deviation <= EXACT_TOLERANCE:
        raise RuntimeError(f"{arch}'s start is declared exact but its logits deviate from the source's by "
                           f"{deviation:.3g} (relative; allowed {EXACT_TOLERANCE:g}); nothing returned")
    if start == "bounded" and not deviation <= bound:
        raise RuntimeError(f"{arch}'s start deviates by {deviation:.3g}, outside its stated bound {bound:.3g}; "
                           "nothing returned")
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    result = UpcycleResult(model=model, arch=arch, start=start, deviation=deviation, bound=bound,
                           loss_source=loss_source, loss_upcycled=loss_upcycled, layout=layout, source=info,
                           sample_tokens=int(ids.numel()), sample=sample, knob=config_class.upcycle_knob,
                           tokenizer=tokenizer, generation_config=generation_config)
    result.report = _report(result, config, grow_mode, dtype or "float32", overrides or {})
    return result


def _report(r: UpcycleResult, config, grow_mode: str, dtype: str, overrides: dict) -> dict:
    grown = [i for i, s in enumerate(r.layout) if s is None]
    return {
        "source": {"name": r.source.name, "family": r.source.family, "revision": r.source.revision,
                   "license": r.source.license, "gguf_file": r.source.gguf_file},
        "arch": r.arch, "start": r.start, "reason": type(config).upcycle_reason,
        "deviation_relative": r.deviation, "bound_relative": r.bound, "knob": r.knob,
        "knob_value": getattr(config, r.knob) if r.knob else None,
        "loss_source": r.loss_source, "loss_upcycled": r.loss_upcycled, "loss_change": r.loss_change,
        "sample": r.sample, "sample_tokens": r.sample_tokens,
        "growth": {"new_blocks": len(grown), "mode": grow_mode if grown else None, "positions": grown,
                   "layout": r.layout},
        "overrides": overrides, "dtype": dtype,
    }
