"""``depthbench.config``: run files, dotted overrides, types, finite numbers and allowed values, checked against
the standard library's YAML/JSON readers.

Run: ``python -m pytest tests/test_config.py -q``
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

import depthbench
from depthbench.config import (
    RunConfigError,
    load_run_config,
    parse_override,
    read_config_file,
    shipped_run_file,
    signal_number,
)
from tests.tiny_runs import tiny_run

CONFIG_DIR = Path(depthbench.__file__).parent / "configs"


@pytest.mark.parametrize("override, match", [
    ("optim.lr=inf", r"optim.lr=inf is not allowed: numbers in the run config must be finite"),
    ("optim.lr=.nan", r"optim.lr=nan is not allowed"),
    ("model.fields.rope_theta=.inf", r"model.fields.rope_theta=inf is not allowed"),
    ("optim.betas=[0.9,.inf]", r"optim.betas\[1\]=inf is not allowed"),
    ("train.preempt_signal=SIGNOPE", r"train.preempt_signal='SIGNOPE' is not allowed"),
    ("data.verify=sometimes", r"data.verify='sometimes' is not allowed"),
])
def test_non_finite_numbers_and_bad_values_are_refused(train_data, tmp_path, override, match):
    with pytest.raises(RunConfigError, match=match):
        load_run_config(tiny_run(train_data, tmp_path / "run"), [override])


def test_load_run_config_from_yaml_json_and_overrides(tmp_path):
    (tmp_path / "run.yaml").write_text("model:\n  arch: pre_ln\n  shape: tiny-L4\ntrain:\n  max_steps: 5\n"
                                       "optim:\n  lr: 1.0e-3\n")
    cfg = load_run_config(tmp_path / "run.yaml", ["train.max_steps=100", "optim.betas=[0.8, 0.9]",
                                                  "model.fields.hidden_size=64", "track.tensorboard=true"])
    assert cfg.train.max_steps == 100 and cfg.optim.lr == 1e-3 and cfg.optim.betas == [0.8, 0.9]
    assert cfg.model.shape == "tiny-L4" and cfg.model.fields == {"hidden_size": 64} and cfg.track.tensorboard is True
    assert cfg.optim.weight_decay == 0.1 and cfg.optim.eps == 1e-8 and cfg.optim.grad_clip == 1.0  # recipe defaults
    (tmp_path / "run.json").write_text(json.dumps(cfg.to_dict()))
    assert load_run_config(tmp_path / "run.json").to_dict() == cfg.to_dict()
    # a saved run_config.json ({"config": ..., "resolved": ...}) loads as well
    (tmp_path / "run_config.json").write_text(json.dumps({"config": cfg.to_dict(), "resolved": {}}))
    assert load_run_config(tmp_path / "run_config.json").to_dict() == cfg.to_dict()


@pytest.mark.parametrize("overrides, match", [
    (["train.max_stepz=3"], "train.max_stepz"),
    (["nonsense"], "section.key=value"),
    (["train.max_steps=3", "train.max_tokens=1000"], "not both"),
    (["train.mixed_precision=fp8"], "train.mixed_precision"),
    (["optim.betas=[0.9]"], "optim.betas"),
    (["train.max_steps=0"], "train.max_steps"),
    (["model.compile_scope=graph"], "model.compile_scope='graph' is not allowed: .* one of layers, model"),
])
def test_bad_run_config_names_the_key(overrides, match):
    with pytest.raises(RunConfigError, match=match):
        load_run_config({}, overrides)


def test_shipped_run_files_load():
    files = sorted(CONFIG_DIR.glob("*.yaml"))
    run_files = [f for f in files if f.name != "fsdp2.yaml"]
    assert {"demo.yaml", "400m.yaml"} <= {f.name for f in run_files}
    for f in run_files:
        cfg = load_run_config(f)
        assert cfg.model.arch and cfg.train.global_batch_size % cfg.train.micro_batch_size == 0
    fsdp = json.loads(json.dumps(__import__("yaml").safe_load((CONFIG_DIR / "fsdp2.yaml").read_text())))
    assert fsdp["distributed_type"] == "FSDP" and fsdp["fsdp_config"]["fsdp_version"] == 2


@pytest.mark.parametrize("text, expected", [
    ("train.max_steps=100", ("train.max_steps", 100)),
    ("optim.betas=[0.9, 0.99]", ("optim.betas", [0.9, 0.99])),
    (" track.wandb = true", ("track.wandb", True)),
    ("model.fields={a: 1}", ("model.fields", {"a": 1})),
    ("output_dir=runs/x=y", ("output_dir", "runs/x=y")),  # the first '=' splits
    ("model.shape=", ("model.shape", None)),
])
def test_overrides_are_parsed_as_yaml(text, expected):
    import yaml

    assert parse_override(text) == expected
    assert expected[1] == yaml.safe_load(text.partition("=")[2] or "null")  # the same value YAML reads


@pytest.mark.parametrize("text", ["=3", "noequals", "train.x=[1, 2"])
def test_malformed_overrides_are_refused(text):
    with pytest.raises(RunConfigError, match="override"):
        parse_override(text)


def test_values_are_coerced_to_the_field_types_and_numbers_given_as_strings_converted():
    cfg = load_run_config({"optim": {"lr": "3e-3", "warmup_steps": "5", "eps": 1}, "train": {"max_steps": 7}},
                          ["data.verify=true", "resume=auto"])
    assert cfg.optim.lr == 3e-3 and isinstance(cfg.optim.eps, float) and cfg.optim.warmup_steps == 5
    assert cfg.data.verify == "always" and load_run_config({}, ["data.verify=false"]).data.verify == "off"
    assert cfg.resume == "auto"
    for overrides, match in ((["train.max_steps=true"], "train.max_steps=True has the wrong type: expected int"),
                             (["train.seed=null"], "train.seed must not be null"),
                             (["optim.lr=fast"], "optim.lr='fast' has the wrong type"),
                             (["model=3"], "model must be a mapping"),
                             (["train.max_steps.x=1"], "'max_steps' is not a section")):
        with pytest.raises(RunConfigError, match=match):
            load_run_config({"train": {"max_steps": 7}}, overrides)


def test_eval_sequences_follow_eval_batches_when_set():
    assert load_run_config({"data": {"eval_sequences": 10}}).eval_sequences == 10
    cfg = load_run_config({"data": {"eval_batches": 3, "eval_sequences": 10}, "train": {"micro_batch_size": 4}})
    assert cfg.eval_sequences == 12


@pytest.mark.parametrize("name, number", [("SIGUSR1", signal.SIGUSR1), ("usr2", signal.SIGUSR2),
                                          (" SIGHUP ", signal.SIGHUP), ("SIGKILL", None), ("STOP", None),
                                          ("SIGNOPE", None), (10, None)])
def test_signal_number(name, number):
    assert signal_number(name) == (None if number is None else int(number))


def test_run_files_empty_not_a_mapping_missing_or_unparsable(tmp_path, monkeypatch):
    (tmp_path / "empty.yaml").write_text("")
    assert load_run_config(tmp_path / "empty.yaml").to_dict() == load_run_config().to_dict()
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(RunConfigError, match="must hold a mapping at top level"):
        read_config_file(str(tmp_path / "list.yaml"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(RunConfigError, match="cannot parse run config file"):
        read_config_file(str(tmp_path / "bad.json"))
    with pytest.raises(RunConfigError, match=r"does not exist \(the installed run files can be named .*demo.yaml"):
        read_config_file(str(tmp_path / "nope.yaml"))
    monkeypatch.chdir(tmp_path)  # a bare shipped name is the installed file unless the folder has one
    assert read_config_file("demo.yaml") == yaml_file(CONFIG_DIR / "demo.yaml")
    (tmp_path / "demo.yaml").write_text("output_dir: mine\n")
    assert read_config_file("demo.yaml") == {"output_dir": "mine"}
    assert shipped_run_file("fsdp2.yaml") is None  # an accelerate launch config, not a run file


def yaml_file(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())
