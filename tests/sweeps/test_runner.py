"""``depthbench.sweeps.runner``: a corrupt checkpoint met inside a sweep is a message.

Run: ``python -m pytest tests/sweeps/test_runner.py -q``
"""

from __future__ import annotations

from tests.helpers import TINY_FIELDS


def test_corrupt_checkpoint_inside_a_sweep_is_a_message(train_data, tmp_path, capsys):
    from depthbench.cli import main

    out = tmp_path / "sweep"
    argv = ["sweep", "--archs", "pre_ln", "--shapes", "tiny-L2", "--data", str(train_data), "--out", str(out),
            "--set", "train.max_steps=2", "--set", "train.stop_at_step=1", "--set", "data.seq_len=32",
            "--set", "train.global_batch_size=4", "--set", "train.micro_batch_size=4",
            "--set", "train.progress=false",
            "--set", "checkpoint.hf_export=false", "--set", "data.eval_sequences=0"]
    for field, value in {**TINY_FIELDS, "head_dim": 8, "vocab_size": 300}.items():
        argv += ["--set", f"model.fields.{field}={value}"]
    assert main(argv) == 0  # stopped at step 1 with a checkpoint
    ckpt = next(out.glob("runs/*/checkpoints/ckpt-000001"))
    (ckpt / "state" / "model.safetensors").write_bytes(b"garbage")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "cannot continue: checkpoint file" in err and "model.safetensors is corrupt" in err
