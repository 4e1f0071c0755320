"""The precision helpers of the modeling files (``modeling/numerics.py``): at-least-fp32 upcasts, the skipped casts,
the inverse RMS (against the textbook formula in fp64) and the autocast switch (against torch's own autocast).

    python -m pytest tests/modeling/test_numerics.py -q
"""

from __future__ import annotations

import pytest
import torch
from depthbench.modeling.numerics import as_dtype, fast_inv_rms, full_precision, inv_rms, upcast


@pytest.mark.parametrize("dtype, wide", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                         (torch.float32, torch.float32), (torch.float64, torch.float64)])
def test_upcast_gives_at_least_fp32_and_returns_wide_tensors_themselves(dtype, wide):
    x = torch.randn(3, 4).to(dtype)
    up = upcast(x)
    assert up.dtype == wide
    assert torch.equal(up, x.to(wide))
    assert (up is x) == (dtype == wide)  # no cast (no aten call) where the dtype already fits


def test_as_dtype_casts_only_when_the_dtype_differs():
    x = torch.randn(5)
    assert as_dtype(x, torch.float32) is x
    cast = as_dtype(x, torch.bfloat16)
    assert cast.dtype == torch.bfloat16 and torch.equal(cast, x.bfloat16())


def _textbook_inv_rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``1 / sqrt(mean(x^2) + eps)`` over the last dim, squared first, in fp64."""
    return 1.0 / torch.sqrt(x.double().pow(2).mean(dim=-1) + eps)


@pytest.mark.parametrize("dtype, out_dtype", [(torch.bfloat16, torch.float32), (torch.float32, torch.float32),
                                              (torch.float64, torch.float64)])
def test_inv_rms_equals_the_textbook_formula_in_at_least_fp32(dtype, out_dtype):
    generator = torch.Generator().manual_seed(0)
    x = (torch.randn(2, 3, 16, generator=generator) * torch.tensor([1e-3, 1.0, 50.0]).view(1, 3, 1)).to(dtype)
    eps = 1e-6
    expected = _textbook_inv_rms(x, eps)
    # fp64 to 1e-8: fast_inv_rms takes eps as an fp32 tensor (its documented form), which is 1e-6 to 3e-8
    tol = dict(rtol=1e-8, atol=0) if dtype == torch.float64 else dict(rtol=1e-5, atol=0)
    for got in (inv_rms(x, eps), fast_inv_rms(x, torch.tensor(eps))):
        assert got.shape == (2, 3) and got.dtype == out_dtype
        torch.testing.assert_close(got.double(), expected, **tol)
    kept = inv_rms(x, eps, keepdim=True)
    assert kept.shape == (2, 3, 1)
    torch.testing.assert_close(kept.double().squeeze(-1), expected, **tol)


def test_inv_rms_adds_eps_inside_the_root():
    """A zero vector gives exactly ``1 / sqrt(eps)``, and eps shifts a unit-RMS vector to ``1 / sqrt(1 + eps)``."""
    zeros, ones = torch.zeros(1, 8), torch.ones(1, 8)
    assert inv_rms(zeros, 0.25).item() == 2.0
    assert fast_inv_rms(zeros, torch.tensor(0.25)).item() == 2.0
    torch.testing.assert_close(inv_rms(ones, 0.21), torch.tensor([1 / 1.1]))  # sqrt(1 + 0.21) = 1.1


def test_inv_rms_gradient_equals_the_textbook_gradient():
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(3, 16, generator=generator, dtype=torch.float64, requires_grad=True)
    (inv_rms(x, 1e-3) ** 3).sum().backward()
    ours, x.grad = x.grad, None
    (_textbook_inv_rms(x, 1e-3) ** 3).sum().backward()
    torch.testing.assert_close(ours, x.grad, rtol=1e-10, atol=1e-12)


def test_full_precision_switches_autocast_off_only_inside_autocast():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    outside = full_precision(a)
    assert outside is full_precision(b)  # one shared no-op context outside autocast
    with outside:
        assert (a @ b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16  # what autocast does to a matmul
        with full_precision(a):
            assert not torch.is_autocast_enabled("cpu")
            assert (a @ b).dtype == torch.float32
        assert torch.is_autocast_enabled("cpu")  # restored on exit
