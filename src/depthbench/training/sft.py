"""``depthbench sft``: supervised fine-tuning on Commonsense170K (or any instruction rows) with ``Trainer``.

    depthbench sft runs/demo/runs/hc__micro-L5__lr0.003__s0 -o runs/hc-L5-sft                # Hub data (online)
    depthbench sft CKPT --data commonsense_170k.json -o DIR --epochs 1 --max-samples 10000   # a local copy
    depthbench sft CKPT --data rows.jsonl -o DIR --lr 5e-5 --global-batch-size 64 --micro-batch-size 8

The study's recipe (arXiv 2609.32534, Sec. 6.4), all overridable:

* Data: ``zwhe99/commonsense_170k`` (train split) by default, or a local JSON / JSONL file of rows with
  ``instruction``, ``input`` (optional) and ``output``; shuffled with seed 42, optionally cut to ``--max-samples``.
* Template (Alpaca): fields stripped; without an ``input`` the preamble "Below is an instruction that describes a
  task. Write a response that appropriately completes the request."; with a non-empty ``input`` the preamble
  "... a task, paired with an input that provides further context. Write a response ..." and a "### Input:"
  section (the study's code uses both preambles; its README shows only the first).
* Sequence = prompt tokens + response tokens + EOS (no special tokens added by the tokenizer); the loss is on the
  response tokens and the EOS only (prompt labels are -100). Longer than ``--max-seq-len`` (512): the first 511
  tokens are kept and EOS is forced at the end; a row whose prompt leaves no response token is an error.
* Training: 3 epochs, global batch 128 sequences, micro-batch 16 (gradient accumulation makes up the rest), AdamW
  (0.9, 0.95), eps 1e-8, weight decay 0.1, LR 1e-4, linear warmup over 3 % of the steps then linear decay to 0,
  gradient clip 1.0, bf16 autocast on a bf16 GPU. Parameter groups come from ``depthbench.training.optim.param_groups``
  (norm gains, biases and each architecture's special parameters are not decayed; the study decayed everything).
  The loss is the mean over all supervised tokens of the global batch (Trainer's ``num_items_in_batch``), so
  gradient accumulation is exact.

The output folder is an ordinary checkpoint: weights, config with remote code (``auto_map``), tokenizer, a model
card naming the base model, ``sft_config.json`` (the settings) and ``sft_summary.json`` (loss history, wall time).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from depthbench import atomic, cards

PREAMBLE = ("Below is an instruction that describes a task. "
            "Write a response that appropriately completes the request.")
PREAMBLE_WITH_INPUT = ("Below is an instruction that describes a task, paired with an input that provides further "
                       "context. Write a response that appropriately completes the request.")
HUB_DATASET = "zwhe99/commonsense_170k"


class SFTError(ValueError):
    """Bad SFT input (row, tokenizer, settings); the message names the row/field and what is allowed."""


# ============================================================================================ template and mask
def format_prompt(instruction: str, input_text: str = "") -> str:
    """The study's Alpaca prompt (fields stripped; the input section and its preamble only for a non-empty input)."""
    instruction, input_text = instruction.strip(), (input_text or "").strip()
    if input_text:
        return (f"{PREAMBLE_WITH_INPUT}\n\n### Instruction:\n{instruction}\n\n### Input:\n{input_text}\n\n"
                "### Response:\n")
    return f"{PREAMBLE}\n\n### Instruction:\n{instruction}\n\n### Response:\n"


def encode_example(tokenizer, row: dict[str, Any], max_seq_len: int = 512, index: int | None = None,
                   where: str | None = None) -> dict[str, list[int]]:
    """``input_ids``, ``labels`` (-100 on the prompt) and ``attention_mask`` of one row; errors name it ``where``
    (e.g. ``line 7 of rows.jsonl``), else ``row <index>``.

    Raises:
        SFTError: A missing/null/non-string field, an empty instruction or output, or a prompt so long that no
            response token survives truncation to ``max_seq_len``.
    """
    where = where or (f"row {index}" if index is not None else "row")
    needs = "rows need 'instruction', 'output' and optionally 'input'"
    for name in ("instruction", "output"):
        if name not in row:
            raise SFTError(f"{where} has no field {name!r} (the row has {', '.join(map(repr, row)) or 'no field'}); "
                           f"{needs}")
        if row[name] is None:  # also a field absent from this row of a table whose other rows have it
            valued = [k for k, v in row.items() if v is not None]
            raise SFTError(f"{where}: field {name!r} is missing or null (the row's fields with a value: "
                           f"{', '.join(map(repr, valued)) or 'none'}); {needs}")
        if not isinstance(row[name], str):
            raise SFTError(f"{where}: field {name!r} must be a string, got {type(row[name]).__name__}")
        if not row[name].strip():
            raise SFTError(f"{where}: field {name!r} is empty")
    input_text = row.get("input") or ""
    if not isinstance(input_text, str):
        raise SFTError(f"{where}: field 'input' must be a string, got {type(input_text).__name__}")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise SFTError("the tokenizer has no EOS token; set tokenizer.eos_token (SFT sequences end in EOS)")
    prompt = tokenizer.encode(format_prompt(row["instruction"], input_text), add_special_tokens=False)
    response = tokenizer.encode(row["output"].strip(), add_special_tokens=False)
    ids = prompt + response + [eos]
    labels = [-100] * len(prompt) + response + [eos]
    if len(ids) > max_seq_len:
        if len(prompt) >= max_seq_len - 1:
            raise SFTError(f"{where}: the prompt is {len(prompt)} tokens, so no response token survives truncation "
                           f"to --max-seq-len {max_seq_len} (first {max_seq_len - 1} tokens + EOS); raise "
                           "--max-seq-len or drop the row")
        ids = ids[: max_seq_len - 1] + [eos]
        labels = labels[: max_seq_len - 1] + [eos]
    return {"input_ids": ids, "labels": labels, "attention_mask": [1] * len(ids)}


# ============================================================================================ settings
@dataclass
class SFTConfig:
    """SFT settings; the defaults are the study's (Sec. 6.4)."""

    checkpoint: str
    output_dir: str
    data: str = HUB_DATASET
    max_samples: int | None = None
    shuffle_seed: int = 42
    max_seq_len: int = 512
    epochs: float = 3.0
    max_steps: int = -1
    global_batch_size: int = 128
    micro_batch_size: int = 16
    lr: float = 1e-4
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_ratio: float = 0.03
    grad_clip: float = 1.0
    seed: int = 0
    bf16: bool | None = None  # None: on a bf16-capable GPU
    use_cpu: bool = False
    trust_remote_code: bool = False
    logging_steps: int = 10
    report_to: list[str] = field(default_factory=lambda: ["none"])
    overwrite: bool = False

    def validate(self) -> None:
        checks = [
            (self.max_seq_len >= 2, f"--max-seq-len must be >= 2, got {self.max_seq_len}"),
            (self.micro_batch_size >= 1, f"--micro-batch-size must be >= 1, got {self.micro_batch_size}"),
            (self.global_batch_size >= self.micro_batch_size,
             f"--global-batch-size {self.global_batch_size} is smaller than --micro-batch-size "
             f"{self.micro_batch_size}"),
            (self.lr > 0, f"--lr must be > 0, got {self.lr}"),
            (0 <= self.warmup_ratio < 1, f"--warmup-ratio must be in [0, 1), got {self.warmup_ratio}"),
            (self.epochs > 0 or self.max_steps > 0, "--epochs must be > 0 (or give --max-steps)"),
            (self.max_samples is None or self.max_samples >= 1, f"--max-samples must be >= 1, got {self.max_samples}"),
        ]
        for ok, message in checks:
            if not ok:
                raise SFTError(message)

    def grad_accum(self, world_size: int = 1) -> int:
        per_step = self.micro_batch_size * world_size
        if self.global_batch_size % per_step:
            raise SFTError(f"--global-batch-size {self.global_batch_size} is not a multiple of --micro-batch-size "
                           f"{self.micro_batch_size} x {world_size} process(es)")
        return self.global_batch_size // per_step


# ============================================================================================ data
ROW_COLUMN = "__row__"
"""The column :func:`load_rows` adds: each row's position in the file or split before shuffling."""


def load_rows(data: str, *, seed: int = 42, max_samples: int | None = None):
    """The instruction rows as a ``datasets.Dataset``: a local ``.json``/``.jsonl`` file, or a Hub dataset id
    (train split); shuffled with ``seed`` and cut to ``max_samples``. Column :data:`ROW_COLUMN` keeps each row's
    position before shuffling (:func:`row_namer` turns it into the row's place in the file)."""
    import datasets

    path = Path(data)
    if path.suffix in (".json", ".jsonl") or path.exists():
        if not path.is_file():
            raise SFTError(f"--data {data}: no such file (give a .json/.jsonl file or a Hub dataset id)")
        if path.suffix not in (".json", ".jsonl"):
            raise SFTError(f"--data {data}: local files must be .json (a list of rows) or .jsonl (one row per line)")
        try:
            ds = datasets.load_dataset("json", data_files={"train": str(path)}, split="train")
        except Exception as exc:  # malformed JSON: name the file
            raise SFTError(f"--data {data}: cannot read it as JSON/JSONL rows: {type(exc).__name__}: {exc}") from exc
    else:
        ds = datasets.load_dataset(data, split="train")
    if len(ds) == 0:
        raise SFTError(f"--data {data} has no rows")
    ds = ds.add_column(ROW_COLUMN, list(range(len(ds)))).shuffle(seed=seed)  # the same order as without it
    if max_samples is not None:
        ds = ds.select(range(min(max_samples, len(ds))))
    return ds


def row_namer(data: str):
    """``position -> "line 7 of rows.jsonl"``: where a row of ``data`` (at ``position`` before shuffling) is in
    the file, 1-based (a JSONL line counting blank lines, the row of a JSON list), or ``<dataset>[train][i]``."""
    path = Path(data)
    if not path.is_file():
        return lambda i: f"{data}[train][{i}]"
    if path.suffix == ".jsonl":
        with open(path, encoding="utf-8") as f:
            numbers = [n for n, line in enumerate(f, start=1) if line.strip()]  # the lines that hold rows
        return lambda i: f"line {numbers[i] if i < len(numbers) else i + 1} of {path.name}"
    return lambda i: f"row {i + 1} of {path.name}"


def tokenize_rows(ds, tokenizer, max_seq_len: int, name_row=None):
    """``ds`` mapped through :func:`encode_example`; errors name each row by ``name_row(position before
    shuffling)`` (:func:`row_namer`) when ``ds`` has :data:`ROW_COLUMN`, else by its position in ``ds``."""
    def encode(row, index):
        position = row.pop(ROW_COLUMN, None)
        where = name_row(position) if name_row and position is not None else None
        return encode_example(tokenizer, row, max_seq_len, index, where=where)

    return ds.map(encode, with_indices=True, remove_columns=ds.column_names, desc="tokenizing")


# ============================================================================================ training
def run_sft(cfg: SFTConfig, log=print) -> dict[str, Any]:
    """Fine-tune ``cfg.checkpoint`` on ``cfg.data`` and save a checkpoint into ``cfg.output_dir``; returns the
    summary (also written to ``sft_summary.json``)."""
    import torch
    from transformers import AutoModelForCausalLM, DataCollatorForSeq2Seq, Trainer

    import depthbench  # noqa: F401  (registers the architectures)
    from depthbench.runs import model_dir
    from depthbench.training.optim import param_groups

    cfg.validate()
    out = Path(cfg.output_dir)
    if (out / "config.json").exists() and not cfg.overwrite:
        raise SFTError(f"{out} already holds a model; choose another -o or pass --overwrite")
    model_id = model_dir(cfg.checkpoint)
    tokenizer = _load_tokenizer(model_id, cfg.trust_remote_code)
    train = tokenize_rows(load_rows(cfg.data, seed=cfg.shuffle_seed, max_samples=cfg.max_samples), tokenizer,
                          cfg.max_seq_len, name_row=row_namer(cfg.data))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model = AutoModelForCausalLM.from_pretrained(model_id, dtype=torch.float32,
                                                 trust_remote_code=cfg.trust_remote_code)
    groups = param_groups(model, lr=cfg.lr, weight_decay=cfg.weight_decay, eps=cfg.eps, betas=tuple(cfg.betas))
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100, padding=True)
    trainer = Trainer(model=model, args=_training_arguments(cfg, out, world), train_dataset=train,
                      data_collator=collator, optimizers=(torch.optim.AdamW(groups, lr=cfg.lr), None))
    log(f"sft: {model_id} on {cfg.data}: {len(train):,} rows, global batch {cfg.global_batch_size} "
        f"(micro {cfg.micro_batch_size} x GA {cfg.grad_accum(world)} x {world} process(es)), lr {cfg.lr}")
    t0 = time.time()
    result = trainer.train()
    wall = time.time() - t0
    out.mkdir(parents=True, exist_ok=True)
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    summary = {
        "base_model": model_id, "data": cfg.data, "rows": len(train), "epochs": cfg.epochs,
        "steps": trainer.state.global_step, "train_loss": result.training_loss,
        "final_train_loss": losses[-1] if losses else result.training_loss,
        "supervised_tokens": int(sum(sum(1 for t in lab if t != -100) for lab in train["labels"])),
        "wall_time_s": round(wall, 2), "log_history": trainer.state.log_history,
    }
    atomic.write_json(str(out / "sft_config.json"), asdict(cfg))
    atomic.write_json(str(out / "sft_summary.json"), summary)
    cards.write_sft_card(out, model_id, cfg.data, summary)
    log(f"sft: {summary['steps']} steps in {wall:.1f}s, final loss {summary['final_train_loss']:.4f}; saved to {out}")
    return summary


def _load_tokenizer(model_id: str, trust_remote_code: bool):
    """The checkpoint's tokenizer, with PAD = EOS when it has no PAD token (padded positions carry label -100 and
    attention mask 0)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_id, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError) as exc:
        raise SFTError(f"checkpoint {model_id} has no loadable tokenizer ({type(exc).__name__}); save the "
                       "tokenizer into the folder (tokenizer.save_pretrained)") from exc
    if tokenizer.eos_token_id is None:
        raise SFTError(f"the tokenizer of {model_id} has no EOS token; set tokenizer.eos_token and save it again")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _training_arguments(cfg: SFTConfig, out: Path, world: int):
    """``TrainingArguments`` of the recipe: linear schedule with warmup, clip, bf16 on a bf16 GPU, no saves."""
    import torch
    from transformers import TrainingArguments

    cuda = torch.cuda.is_available() and not cfg.use_cpu
    bf16 = cfg.bf16 if cfg.bf16 is not None else bool(cuda and torch.cuda.is_bf16_supported())
    return TrainingArguments(
        output_dir=str(out), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.micro_batch_size, gradient_accumulation_steps=cfg.grad_accum(world),
        learning_rate=cfg.lr, weight_decay=cfg.weight_decay, adam_beta1=cfg.betas[0], adam_beta2=cfg.betas[1],
        adam_epsilon=cfg.eps, lr_scheduler_type="linear", warmup_steps=cfg.warmup_ratio, max_grad_norm=cfg.grad_clip,
        bf16=bf16, use_cpu=not cuda, seed=cfg.seed, logging_steps=cfg.logging_steps, save_strategy="no",
        report_to=cfg.report_to, dataloader_num_workers=0, remove_unused_columns=False,
    )
