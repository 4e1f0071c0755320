"""``depthbench.training.model_state``: the key sets a checkpoint's ``state/`` folder holds, read from the files'
headers, and a sharded (``torch.distributed.checkpoint``) state read into one plain process. Oracles: files
written here by safetensors and by ``torch.distributed.checkpoint`` itself, and the tensors they were written
from. Whole runs that save and resume either format: tests/training/test_checkpoint.py, test_fsdp2.py.

    python -m pytest tests/training/test_model_state.py -q
"""

from __future__ import annotations

import warnings

import torch

from depthbench.training.model_state import _load_sharded, is_sharded, saved_keys, state_keys
from tests.helpers import random_ids, tiny_model


def _dcp_save(state: dict, path) -> None:
    import torch.distributed.checkpoint as dcp

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        dcp.save(state, checkpoint_id=str(path))


def test_the_key_set_of_a_full_checkpoint_is_read_from_the_safetensors_header(tmp_path):
    from safetensors.torch import save_file

    save_file({"module.model.embed_tokens.weight": torch.zeros(7, 3), "lm_head.weight": torch.zeros(7, 3),
               "model.norm.weight": torch.zeros(3)}, str(tmp_path / "model.safetensors"))
    assert not is_sharded(str(tmp_path))
    assert saved_keys(str(tmp_path)) == {"model.embed_tokens.weight": [7, 3], "lm_head.weight": [7, 3],
                                         "model.norm.weight": [3]}  # accelerate's DDP "module." prefix dropped


def test_the_key_set_of_a_sharded_checkpoint_is_its_model_entries(tmp_path):
    _dcp_save({"model": {"model.norm.weight": torch.ones(5), "lm_head.weight": torch.ones(4, 5)},
               "optim": {"state": {"lm_head.weight": {"exp_avg": torch.zeros(4, 5)}}}}, tmp_path / "dcp")
    assert is_sharded(str(tmp_path))
    assert saved_keys(str(tmp_path)) == {"model.norm.weight": [5], "lm_head.weight": [4, 5]}


def test_a_state_folder_without_either_format_has_no_key_set(tmp_path):
    (tmp_path / "optimizer.bin").write_bytes(b"")
    assert saved_keys(str(tmp_path)) is None


def test_state_keys_are_the_unwrapped_names_and_shapes():
    state = {"module.model.norm.weight": torch.ones(5), "lm_head.weight": torch.ones(4, 5), "scale": torch.ones(())}
    assert state_keys(state) == {"model.norm.weight": [5], "lm_head.weight": [4, 5], "scale": []}


def test_a_sharded_checkpoint_loads_into_one_plain_process(tmp_path):
    """Written by torch.distributed.checkpoint from a model and an AdamW that took a step; read into a fresh model
    and optimizer without a process group: the same weights and the same AdamW moments."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    trained = tiny_model("hc", seed=0).train()
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-2)
    ids = random_ids(2, 8)
    trained(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    _dcp_save({"model": get_model_state_dict(trained), "optim": get_optimizer_state_dict(trained, optimizer)},
              tmp_path / "dcp")
    fresh = tiny_model("hc", seed=1).train()
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    _load_sharded(str(tmp_path / "dcp"), fresh, fresh_optimizer)
    for (name, p), q in zip(trained.named_parameters(), fresh.parameters()):
        assert torch.equal(p, q), name
        assert torch.equal(optimizer.state[p]["exp_avg_sq"], fresh_optimizer.state[q]["exp_avg_sq"]), name
