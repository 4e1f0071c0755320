"""``depthbench.training.command``: the ``depthbench train`` flags as run-config keys (file, then flags, then
dotted overrides), the ``depthbench sft`` flags as an :class:`~depthbench.training.sft.SFTConfig`, and
``python -m depthbench.training``'s exit on bad input. Oracles: the keys and values each flag's help names, and
``SFTConfig``'s own defaults. Training runs through the command: tests/training/test_run.py, test_init_from.py.

    python -m pytest tests/training/test_command.py -q
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from depthbench.training.command import add_arguments, config_from_args, main, register_cli, sft_config_from_args


def _train_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_train_flags_set_their_keys_and_dotted_overrides_win(tmp_path):
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps({"model": {"arch": "hc"}, "train": {"max_steps": 7, "layer_stats_every": 3}}))
    cfg = config_from_args(_train_args([
        "-c", str(run_file), "--arch", "mhc", "--shape", "tiny-L4", "--data", str(tmp_path / "data"),
        "-o", str(tmp_path / "run"), "--resume", "--layer-stats-every", "5", "--profile",
        "--verify-data", "--wait-for-writer", "2.5", "--preempt-signal", "SIGTERM", "model.arch=attnres"]))
    assert cfg.model.arch == "attnres"  # the dotted override beats the flag, which beats the file
    assert cfg.model.shape == "tiny-L4" and cfg.train.max_steps == 7  # the file's value where no flag is given
    assert cfg.data.data_dir == str(tmp_path / "data") and cfg.output_dir == str(tmp_path / "run")
    assert cfg.resume is True and cfg.overwrite is False and cfg.train.profile is True
    assert cfg.train.layer_stats_every == 5 and cfg.wait_for_writer == 2.5
    assert cfg.data.verify == "always" and cfg.train.preempt_signal == "SIGTERM"
    again = config_from_args(_train_args(["-c", str(run_file), "--overwrite"]))
    assert again.overwrite is True and again.resume is False and again.model.arch == "hc"


def test_preempt_signal_none_turns_the_extra_signal_off():
    for spelling in ("none", "NONE", "null"):
        assert config_from_args(_train_args(["--preempt-signal", spelling])).train.preempt_signal is None


def test_sft_flags_become_the_sft_config():
    from depthbench.training.sft import SFTConfig

    parser = argparse.ArgumentParser()
    register_cli(parser.add_subparsers())
    args = parser.parse_args(["sft", "ckpt", "-o", "out", "--bf16", "no", "--report-to", "tensorboard,wandb",
                              "--beta2", "0.99", "--cpu", "--max-steps", "12"])
    config = sft_config_from_args(args)
    assert (config.bf16, config.report_to, config.betas) == (False, ["tensorboard", "wandb"], (0.9, 0.99))
    assert config.use_cpu is True and config.max_steps == 12
    defaults = sft_config_from_args(parser.parse_args(["sft", "ckpt", "-o", "out"]))
    assert dataclasses.asdict(defaults) == dataclasses.asdict(SFTConfig("ckpt", "out"))  # the flags' defaults
    assert sft_config_from_args(parser.parse_args(["sft", "c", "-o", "o", "--bf16", "yes"])).bf16 is True


def test_python_m_training_refuses_bad_input_in_one_line(capsys):
    assert main(["--arch", "hc", "train.max_steps=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "depthbench train: error: data.data_dir is required (a folder made by `depthbench prepare-data`)"
