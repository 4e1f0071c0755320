"""``depthbench.training.sharding``: the FSDP2 settings a launch config asks for (and the ones refused), and the
FSDP2 helpers in one process (a gloo world of 1, what ``train.parallelism=fsdp2`` makes on one device): the
replicated 0-dim parameters, global clipping, the gathered state dict and the plain model of the HF export.
Oracles: accelerate's launch-config file, ``torch.nn.utils.clip_grad_norm_`` and the state dict of an unsharded
copy. Multi-process FSDP2 runs: ``tests/training/test_fsdp2.py``.

    python -m pytest tests/training/test_sharding.py -q
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
import yaml

from depthbench.config import RunConfigError, load_run_config
from depthbench.training.sharding import Fsdp2, Fsdp2Settings, accelerate_fsdp_off, requested
from tests.helpers import REPO_ROOT, random_ids, tiny_model

FSDP2_CONFIG = REPO_ROOT / "src" / "depthbench" / "configs" / "fsdp2.yaml"


def test_launch_config_is_read_and_refused_settings_are_named():
    config = yaml.safe_load(FSDP2_CONFIG.read_text())
    assert config["distributed_type"] == "FSDP" and config["fsdp_config"]["fsdp_version"] == 2
    # what `accelerate launch --config_file fsdp2.yaml` exports to the processes (printed by accelerate 1.15)
    env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "true",
           "FSDP_STATE_DICT_TYPE": "SHARDED_STATE_DICT", "FSDP_OFFLOAD_PARAMS": "false",
           "FSDP_ACTIVATION_CHECKPOINTING": "false"}
    assert requested("auto", env).reshard_after_forward is True
    assert requested("auto", {**env, "FSDP_RESHARD_AFTER_FORWARD": "false"}).reshard_after_forward is False
    assert requested("auto", {}) is None and requested("ddp", {}) is None
    assert requested("fsdp2", {}).reshard_after_forward is True  # torchrun / one process: train.parallelism=fsdp2
    for changed, match in [({"FSDP_VERSION": "1"}, "FSDP2 only"), ({"FSDP_OFFLOAD_PARAMS": "true"}, "offload"),
                           ({"FSDP_ACTIVATION_CHECKPOINTING": "true"}, "gradient_checkpointing"),
                           ({"FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}, "SHARDED_STATE_DICT")]:
        with pytest.raises(RunConfigError, match=match):
            requested("auto", {**env, **changed})
    with pytest.raises(RunConfigError, match="drop one of the two"):
        requested("ddp", env)
    with pytest.raises(RunConfigError, match="train.parallelism"):
        load_run_config({}, ["train.parallelism=zero3"])


def test_mixed_precision_no_is_accepted_as_yaml_reads_it(tmp_path):
    """YAML 1.1 reads ``no`` as false (``train.mixed_precision=no``, ``mixed_precision: no``): it is the string
    "no" that the FSDP2 error message asks for, in every spelling."""
    run_file = tmp_path / "run.yaml"
    run_file.write_text("train:\n  mixed_precision: no\n")
    for cfg in (load_run_config({}, ["train.mixed_precision=no"]), load_run_config(str(run_file)),
                load_run_config({"train": {"mixed_precision": False}}),
                load_run_config({}, ["train.mixed_precision='no'"])):
        assert cfg.train.mixed_precision == "no"
    assert Fsdp2(Fsdp2Settings(), torch.device("cpu"), "no").mixed_precision == "no"
    with pytest.raises(RunConfigError, match="use bf16 .* or no"):
        Fsdp2(Fsdp2Settings(), torch.device("cpu"), "fp16")
    with pytest.raises(RunConfigError, match="train.mixed_precision=True"):  # `yes` is not an allowed value
        load_run_config({}, ["train.mixed_precision=yes"])


def test_bad_parallelism_and_flag_values_are_refused_saying_what_is_allowed():
    with pytest.raises(RunConfigError, match=r"train.parallelism='zero3' is not allowed: use one of auto, ddp, "
                                             r"fsdp2"):
        requested("zero3", {})
    env = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_RESHARD_AFTER_FORWARD": "maybe"}
    with pytest.raises(RunConfigError, match=r"FSDP_RESHARD_AFTER_FORWARD='maybe' \(from the accelerate launch "
                                             r"config\) is not allowed: use true or false"):
        requested("auto", env)


def test_accelerate_does_not_see_an_fsdp_launch_while_the_accelerator_is_built(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(KeyError):
        with accelerate_fsdp_off():
            assert "ACCELERATE_USE_FSDP" not in os.environ
            raise KeyError("a failure while building")
    assert os.environ["ACCELERATE_USE_FSDP"] == "true"  # restored, also after a failure
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    with accelerate_fsdp_off():
        pass
    assert "ACCELERATE_USE_FSDP" not in os.environ  # nothing invented


@pytest.fixture
def sharded_hc():
    """``(plain copy, FSDP2, sharded model)``: a tiny HC model sharded in a gloo world of 1 made here (and
    destroyed after), with one backward done on both."""
    import torch.distributed as dist

    owned = not dist.is_initialized()
    model = tiny_model("hc").train()
    plain = copy.deepcopy(model)
    fsdp = Fsdp2(Fsdp2Settings(), torch.device("cpu"), "no")
    sharded = fsdp.shard(model)
    ids = random_ids(2, 8)
    for m in (plain, sharded):
        m(input_ids=ids, labels=ids).loss.backward()
    try:
        yield plain, fsdp, sharded
    finally:
        if owned and dist.is_initialized():
            dist.destroy_process_group()


def test_zero_dim_parameters_are_replicated_and_the_rest_sharded(sharded_hc):
    from torch.distributed.tensor import DTensor

    plain, fsdp, sharded = sharded_hc
    zero_dim = {name for name, p in plain.named_parameters() if p.ndim == 0}
    assert zero_dim  # HC's gate scales
    assert {id(p) for p in fsdp.replicated} == {id(p) for n, p in sharded.named_parameters() if n in zero_dim}
    assert all(isinstance(p, DTensor) == (n not in zero_dim) for n, p in sharded.named_parameters())
    fsdp.sync_replicated_grads()  # world of 1: the gradients stay what they are
    grads = dict(sharded.named_parameters())
    assert all(torch.equal(grads[n].grad, p.grad) for n, p in plain.named_parameters() if n in zero_dim)


def test_clipping_equals_torch_on_the_unsharded_model(sharded_hc):
    from torch.distributed.tensor import DTensor

    plain, fsdp, sharded = sharded_hc
    expected = torch.nn.utils.clip_grad_norm_(plain.parameters(), 0.05)
    total = fsdp.clip_grad_norm_(sharded.parameters(), 0.05)
    assert expected > 0.05  # the clip binds
    assert not isinstance(total, DTensor)
    torch.testing.assert_close(total, expected.float(), rtol=1e-5, atol=0)
    clipped = dict(sharded.named_parameters())
    for name, p in plain.named_parameters():
        got = clipped[name].grad
        got = got.full_tensor() if isinstance(got, DTensor) else got
        torch.testing.assert_close(got, p.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_the_export_gets_the_whole_state_dict_and_an_unsharded_model_class(sharded_hc):
    from torch.distributed.fsdp import FSDPModule

    plain, _, sharded = sharded_hc
    full = Fsdp2.full_state_dict(sharded)
    expected = plain.state_dict()
    assert sorted(full) == sorted(expected)
    assert all(torch.equal(full[k].cpu(), v) for k, v in expected.items())
    export = Fsdp2.plain_model(sharded)
    assert type(export) is type(plain) and not isinstance(export, FSDPModule)
    assert next(export.parameters()).is_meta and export.config is sharded.config
