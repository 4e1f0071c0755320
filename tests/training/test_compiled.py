"""The compiled training path (``depthbench.training.compiled.compile_model``, the trainer's ``model.compile=true``).

* every registered architecture's training forward (residual wiring included) traces into one graph with no graph
  break (``torch._dynamo.explain``; fast, default suite);
* the default ``scope="layers"`` compiles each decoder block on its own: traced with Dynamo's ``eager`` backend
  (seconds, default suite), losses and gradients equal eager bitwise, blocks of the same structure share one
  graph (Pre-LN, HC, mHC compile one block at any depth), and designs with one graph per block never fall back to
  eager past Dynamo's default recompile limit of 8;
* compiled losses and gradients equal eager ones within 1e-5, for every architecture (slow: Inductor compiles on
  CPU took 4-9 min per architecture on the shared 2-core machine at load ~9);
* ``compile_model`` compiles in place: same module, same parameter names.

    python -m pytest tests/training/test_compiled.py -q                 # explain + in-place checks
    DEPTHBENCH_RUN_SLOW=1 python -m pytest tests/training/test_compiled.py -q -m slow
"""

from __future__ import annotations

import pytest
import torch

from depthbench.registry import build_model
from depthbench.training.compiled import compile_model, decoder_layers
from tests.helpers import ARCH_IDS

SMALL = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 2,
         "vocab_size": 64, "max_position_embeddings": 16}


def _model(arch_id: str, **overrides):
    torch.manual_seed(0)
    return build_model(arch_id, **{**SMALL, **overrides}).train()


def _ids() -> torch.Tensor:
    return torch.randint(0, SMALL["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(1))


def _loss(model, ids):
    return model(input_ids=ids, labels=ids, use_cache=False).loss


@pytest.mark.parametrize("arch_id", ARCH_IDS)
def test_training_forward_has_no_graph_break(arch_id):
    torch._dynamo.reset()
    model, ids = _model(arch_id), _ids()
    explanation = torch._dynamo.explain(lambda x: _loss(model, x))(ids)
    reasons = [str(r.reason) for r in explanation.break_reasons]
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1, reasons


@pytest.mark.parametrize("scope", ["layers", "model"])
def test_compile_model_is_in_place(scope):
    model = _model("hc")
    names = [name for name, _ in model.named_parameters()]
    assert compile_model(model, scope=scope) is model
    assert [name for name, _ in model.named_parameters()] == names
    assert not any(key.startswith("_orig_mod") for key in model.state_dict())


def _graphs_and_differences(arch_id: str, num_layers: int, checkpointing: bool = False) -> tuple[int, float, float]:
    """Compile a ``num_layers`` model with ``scope="layers"`` and Dynamo's ``eager`` backend (tracing only, no
    Inductor), run one training forward and backward beside an eager twin; returns the number of graphs Dynamo
    traced and the largest loss and gradient differences."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled, eager = (_model(arch_id, num_hidden_layers=num_layers) for _ in range(2))
    ids = _ids()
    if checkpointing:
        for model in (compiled, eager):
            model.gradient_checkpointing_enable()
    compile_model(compiled, scope="layers", backend="eager")
    losses = []
    for model in (compiled, eager):
        loss = _loss(model, ids)
        loss.backward()
        losses.append(loss.detach())
    grads = max(float((p.grad - q.grad).abs().max()) for p, q in zip(compiled.parameters(), eager.parameters()))
    return counters["stats"]["unique_graphs"], float((losses[0] - losses[1]).abs()), grads


@pytest.mark.parametrize("arch_id", ARCH_IDS)
def test_layers_scope_equals_eager(arch_id):
    graphs, loss_diff, grad_diff = _graphs_and_differences(arch_id, 3)
    assert 1 <= graphs <= 3  # at most one graph per block; the head and loss stay eager
    assert loss_diff == 0.0 and grad_diff == 0.0


@pytest.mark.parametrize("arch_id", ["pre_ln", "hc", "mhc"])
def test_layers_scope_traces_one_block_at_any_depth(arch_id):
    assert _graphs_and_differences(arch_id, 6)[0] == 1


@pytest.mark.slow  # 12-32 s on 2 cores: the default suite stays near 10 minutes
def test_layers_scope_compiles_every_block_past_the_recompile_limit():
    """AttnRes blocks each see one more source: 10 blocks trace 10 graphs (Dynamo's default limit is 8, past which
    the remaining blocks would run eager), also when a second such model shares the block code in the process."""
    from torch._dynamo.utils import counters

    config = torch._dynamo.config
    limits = config.recompile_limit, config.accumulated_recompile_limit
    try:
        config.recompile_limit = 8
        graphs, loss_diff, grad_diff = _graphs_and_differences("attnres", 10)
        assert graphs == 10 and config.recompile_limit == 18
        assert loss_diff == 0.0 and grad_diff == 0.0
        second = compile_model(_model("block_attnres", num_hidden_layers=10), backend="eager")  # same block code
        _loss(second, _ids()).backward()
        assert counters["stats"]["unique_graphs"] == 20 and config.recompile_limit == 28
    finally:
        config.recompile_limit, config.accumulated_recompile_limit = limits


@pytest.mark.parametrize("arch_id", ["hc", "attnres"])
def test_layers_scope_with_gradient_checkpointing(arch_id):
    _, loss_diff, grad_diff = _graphs_and_differences(arch_id, 2, checkpointing=True)
    assert loss_diff == 0.0 and grad_diff <= 1e-6


def test_compile_scope_errors():
    with pytest.raises(ValueError, match="compile scope 'everything' is not allowed: use one of layers, model"):
        compile_model(_model("pre_ln"), scope="everything")
    with pytest.raises(ValueError, match="needs a decoder with blocks at model.base_model.layers"):
        decoder_layers(torch.nn.Linear(2, 2))


# Inductor compiles each architecture for minutes on 2 CPU cores: CI's slow run covers a plain and a multi-stream
# architecture, the rest run with --runcompile / DEPTHBENCH_RUN_COMPILE=1.
_CI_COMPILED = ("pre_ln", "hc")


@pytest.mark.slow
@pytest.mark.parametrize("arch_id", [a if a in _CI_COMPILED else pytest.param(a, marks=pytest.mark.compile)
                                     for a in ARCH_IDS])
def test_compiled_loss_and_gradients_equal_eager(arch_id, scope="layers"):
    torch._dynamo.reset()
    eager, compiled, ids = _model(arch_id), compile_model(_model(arch_id), scope=scope), _ids()
    for step in range(2):  # the second step runs the cached compiled graphs after an optimizer update
        losses = []
        for model in (eager, compiled):
            loss = _loss(model, ids)
            loss.backward()
            losses.append(float(loss.detach()))
        assert abs(losses[0] - losses[1]) <= 1e-5, (step, losses)
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            assert torch.allclose(p.grad, q.grad, atol=1e-5, rtol=1e-4), (step, name)
        with torch.no_grad():
            for model in (eager, compiled):
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None


@pytest.mark.slow
@pytest.mark.compile
def test_trainer_compile_flag_uses_the_compiled_path(tmp_path, monkeypatch):
    """``model.compile=true`` goes through ``compile_model`` and trains to the eager losses (within 1e-5)."""
    from depthbench.config import load_run_config
    from depthbench.training import compiled
    from depthbench.training.trainer import train
    from tests.helpers import TINY_FIELDS, make_train_data

    data_dir = make_train_data(tmp_path / "data")
    calls = []
    real = compiled.compile_model
    monkeypatch.setattr(compiled, "compile_model", lambda model, **kw: calls.append(type(model)) or real(model, **kw))

    def run(out, *overrides):
        base = {"model": {"arch": "hc", "fields": TINY_FIELDS},
                "data": {"data_dir": str(data_dir), "seq_len": 32, "eval_sequences": 0, "prefetch": 1},
                "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 2, "progress": False},
                "checkpoint": {"hf_export": False, "hash_files": False}, "output_dir": str(out)}
        return train(load_run_config(base, list(overrides)))

    torch._dynamo.reset()
    eager = run(tmp_path / "eager")
    compiled_run = run(tmp_path / "compiled", "model.compile=true")
    assert len(calls) == 1
    assert abs(compiled_run["final_train_loss"] - eager["final_train_loss"]) <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("arch_id", ["hc", pytest.param("attnres", marks=pytest.mark.compile)])
def test_whole_model_compiled_loss_and_gradients_equal_eager(arch_id):
    test_compiled_loss_and_gradients_equal_eager(arch_id, scope="model")
