"""The norms (``modeling/norms.py``): ``OutputRMSNorm`` equals ``RMSNorm`` (with gradients, gradcheck) while saving
less for backward, and its fused residual add equals the norm then the add.

Run: ``python -m pytest tests/modeling/test_norms.py -q``
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling import norms
from depthbench.modeling.norms import OutputRMSNorm, RMSNorm

from tests.helpers import random_ids, tiny_model
from tests.modeling.saved_tensors import saved_storages


def test_output_norm_with_residual_equals_the_norm_then_the_add():
    norm = norms.OutputRMSNorm(32, eps=1e-5).eval()  # fast paths are for eval-mode modules
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(32, generator=generator))
    stream, x = torch.randn(2, 3, 32, generator=generator), 7 * torch.randn(2, 3, 32, generator=generator)
    x.requires_grad_(True)
    differentiable = norm(x, residual=stream)
    differentiable.sum().backward()
    assert x.grad is not None and norm.weight.grad is not None  # the training path keeps its gradients
    assert "eps" not in norm.__dict__.get("_derived_weights", {})  # autograd on: the differentiable path
    with torch.no_grad():
        torch.testing.assert_close(norm(x, residual=stream), stream + norm(x), rtol=1e-6, atol=1e-6)
        assert "eps" in norm.__dict__["_derived_weights"]  # the fused add ran
        torch.testing.assert_close(norm(x, residual=stream), differentiable, rtol=1e-6, atol=1e-6)
        xb = x.bfloat16()  # a bf16 branch output (autocast): normalised in fp32, cast back, then scaled
        torch.testing.assert_close(norm(xb, residual=stream), stream + norm(xb), rtol=1e-6, atol=1e-5)
        norm.train()  # a training-mode module (reentrant checkpointing's no-grad forward) keeps the plain sum
        norm.__dict__["_derived_weights"].clear()
        assert torch.equal(norm(x, residual=stream), stream + norm(x))
        assert "eps" not in norm.__dict__["_derived_weights"]


# ---------------------------------------------------------------------------------------------- KEEL, Peri-LN
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_norm_equals_rmsnorm_with_gradients_and_saves_less(dtype):
    plain, fused = RMSNorm(32).to(dtype), OutputRMSNorm(32).to(dtype)
    with torch.no_grad():
        plain.weight.normal_()
        fused.weight.copy_(plain.weight)
    x = (3 * torch.randn(2, 7, 32, dtype=dtype)).requires_grad_()
    cotangent = torch.randn(2, 7, 32, dtype=dtype)
    want, saved_plain = saved_storages(plain, x)
    got, saved_fused = saved_storages(fused, x)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got, want, rtol=0, atol=tol)
    for a, b in zip(torch.autograd.grad(got, (x, fused.weight), cotangent),
                    torch.autograd.grad(want, (x, plain.weight), cotangent)):
        torch.testing.assert_close(a, b, rtol=0, atol=10 * tol)
    full_size = lambda tensors: [t for t in tensors if t.numel() == x.numel()]  # noqa: E731
    assert len(full_size(saved_fused)) == 1 < len(full_size(saved_plain))  # the input only
    with torch.no_grad():
        torch.testing.assert_close(fused(x), want, rtol=0, atol=tol)


def test_output_norm_gradcheck():
    norm = OutputRMSNorm(8).double()
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, w: norm.forward(a) * 1.0, (x, norm.weight))


def _saved_bytes(model, ids) -> int:
    sizes = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(input_ids=ids, labels=ids)
    return sum(sizes.values())


def test_peri_ln_keeps_one_tensor_per_output_norm_beyond_pre_ln():
    """Peri-LN's output norms read the branch outputs, which nothing else keeps: each saves exactly its input, the
    per-token scale and its gain on top of what Pre-LN saves (a plain RMSNorm would also keep the normalised copy)."""
    ids = random_ids(2, 16)
    pre_ln, peri_ln = tiny_model("pre_ln"), tiny_model("peri_ln")
    tokens, d = ids.numel(), pre_ln.config.hidden_size
    extra = _saved_bytes(peri_ln, ids) - _saved_bytes(pre_ln, ids)
    assert extra == pre_ln.config.num_sublayers * (tokens * d + tokens + d) * 4
