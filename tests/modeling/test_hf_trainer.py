"""Every architecture trains correctly under ``transformers.Trainer`` with gradient accumulation.

The loss is the token-level mean over the whole accumulated batch (the model divides the summed loss by the
``num_items_in_batch`` the Trainer passes), so 2 micro-batches of 2 sequences with GA 2 must take exactly the
same optimizer steps as 1 batch of 4 sequences. The sequences have different numbers of ``-100`` labels, so a
per-micro-batch mean (or a missing or doubled GA division) changes the result and fails the test.

Run it with ``python -m pytest tests/modeling/test_hf_trainer.py -q``.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import Trainer, TrainingArguments

from tests.helpers import ARCH_IDS, max_abs_diff, random_ids, tiny_model

ARCH = pytest.mark.parametrize("arch_id", ARCH_IDS)
STEPS = 2
SEQ_LEN = 12


def _dataset(num_rows: int = 4 * STEPS) -> Dataset:
    """Fixed rows whose number of supervised tokens varies (leading labels masked with -100)."""
    rows = []
    for i in range(num_rows):
        ids = random_ids(1, SEQ_LEN, seed=100 + i)[0]
        labels = ids.clone()
        labels[: (3 * i) % 8] = -100
        rows.append({"input_ids": ids.tolist(), "labels": labels.tolist(), "attention_mask": [1] * SEQ_LEN})
    return Dataset.from_list(rows)


def _train(arch_id: str, initial_state: dict, batch_size: int, grad_accum: int, output_dir) -> dict:
    model = tiny_model(arch_id)
    model.load_state_dict(initial_state)
    args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=grad_accum,
        max_steps=STEPS,
        optim="sgd",
        learning_rate=0.1,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,  # no clipping
        train_sampling_strategy="sequential",
        dataloader_num_workers=0,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=0,
    )
    Trainer(model=model, args=args, train_dataset=_dataset()).train()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


@ARCH
def test_gradient_accumulation_matches_full_batch(arch_id, tmp_path):
    initial = tiny_model(arch_id, seed=1).state_dict()
    accumulated = _train(arch_id, initial, batch_size=2, grad_accum=2, output_dir=tmp_path / "ga2")
    full_batch = _train(arch_id, initial, batch_size=4, grad_accum=1, output_dir=tmp_path / "ga1")
    moved = max(max_abs_diff(full_batch[k], initial[k]) for k in initial if initial[k].is_floating_point())
    assert moved > 1e-3, "training did not change the parameters"
    for name, tensor in full_batch.items():
        if tensor.is_floating_point():
            assert max_abs_diff(accumulated[name], tensor) < 1e-5, f"{name}: GA 2x2 != batch 4"


def test_trainer_sees_loss_kwargs(tmp_path):
    """The Trainer must pass ``num_items_in_batch`` (the backbone forwards it into the loss)."""
    model = tiny_model(ARCH_IDS[0])
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert Trainer(model=model, args=args).model_accepts_loss_kwargs
    ids = torch.ones(1, 4, dtype=torch.long)
    summed = model(input_ids=ids, labels=ids, num_items_in_batch=1).loss
    mean = model(input_ids=ids, labels=ids).loss
    assert abs(summed.item() - 3 * mean.item()) < 1e-5  # 3 supervised tokens: sum / 1 == 3 x mean
