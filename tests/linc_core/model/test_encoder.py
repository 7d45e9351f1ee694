"""``linc_core.model.encoder.attention``: float32 on CPU under half precision, else as called."""

from __future__ import annotations

import pytest
import torch

from linc_core.model.encoder import attention


def _inputs(dtype: torch.dtype, queries: int = 5, grad: bool = False):
    generator = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(2, 4, n, 8, generator=generator).to(dtype).requires_grad_(grad)
        for n in (queries, 7, 7)
    )
    mask = torch.rand(2, 1, queries, 7, generator=generator) > 0.4
    mask[..., 0] = True  # every query may attend somewhere
    return q, k, v, mask


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_full_precision_is_scaled_dot_product_attention_itself(dtype: torch.dtype) -> None:
    q, k, v, mask = _inputs(dtype)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    out = attention(q, k, v, mask)
    assert out.dtype == dtype and torch.equal(out, expected)
    assert torch.equal(
        attention(q, k, v), torch.nn.functional.scaled_dot_product_attention(q, k, v)
    )


def test_float32_inputs_under_cpu_autocast_stay_float32() -> None:
    """Autocast would hand ``scaled_dot_product_attention`` bf16 copies of float32 inputs (the
    slow backward): under it, float32 inputs are attended in float32 as they are."""
    q, k, v, mask = _inputs(torch.float32)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(q, k, v, mask)
    assert out.dtype == torch.float32 and torch.equal(out, expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_on_cpu_run_in_float32(dtype: torch.dtype) -> None:
    """The bf16 CPU kernel is 7-10x slower backward: the inputs are cast up, the result is
    float32 and equal to float32 attention of the cast inputs, under autocast too."""
    q, k, v, mask = _inputs(dtype)
    expected = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask
    )
    assert torch.equal(attention(q, k, v, mask), expected)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast would cast them back to bf16
        out = attention(q, k, v, mask)
    assert out.dtype == torch.float32 and torch.equal(out, expected)
    # float32 queries against half keys (a float32 step query over a bf16 encoder cache)
    assert torch.equal(attention(q.float(), k, v, mask), expected)


def test_the_gradient_reaches_half_inputs_in_their_dtype() -> None:
    """Backward runs in float32 and hands each bf16 input a bf16 gradient, the float32 one's
    rounding."""
    q, k, v, mask = _inputs(torch.bfloat16, grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attention(q, k, v, mask)
    weights = torch.linspace(-1.0, 1.0, out.numel()).view_as(out)
    (out * weights).sum().backward()
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    out32 = torch.nn.functional.scaled_dot_product_attention(q32, k32, v32, attn_mask=mask)
    (out32 * weights).sum().backward()
    for half, full in ((q, q32), (k, k32), (v, v32)):
        assert half.grad.dtype == torch.bfloat16
        assert torch.equal(half.grad, full.grad.to(torch.bfloat16))
