"""Multi-head attention for the encoder and the decoder's glimpse, in float32 on CPU under bf16.

PyTorch's CPU attention kernel (``scaled_dot_product_attention``) in bf16 is no faster forward
than in float32 and 7-10x slower backward at this model's shapes (heads of 16 dimensions over
51 keys, one thread, 2026-11-28: forward and backward 36.7 ms against 5.2 ms for 128 queries,
75.5 ms against 14.0 ms for 400), which made a bf16 training step slower than a float32 one on
a CPU whose bf16 matrix units run the linear layers 4-6x faster. Attention is a small share of
the model's multiply-adds, so on CPU under half-precision autocast its inputs are cast up and
it runs in float32; its output goes on in float32, which autocast casts down again where a
linear layer reads it. On CUDA (and in float32 or float64) it runs as it is called.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

_HALF = (torch.bfloat16, torch.float16)


def attention(query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None) -> Tensor:
    """``scaled_dot_product_attention``: ``[B, H, Q, E]`` from queries ``[B, H, Q, E]``, keys and
    values ``[B, H, N, E]`` and an optional bool ``mask`` broadcast to ``[B, H, Q, N]`` (True =
    may attend); in float32 on CPU when any input is half precision (the module's reason)."""
    if query.device.type == "cpu" and (query.dtype in _HALF or keys.dtype in _HALF):
        with torch.autocast("cpu", enabled=False):
            return nn.functional.scaled_dot_product_attention(
                query.float(), keys.float(), values.float(), attn_mask=mask
            )
    return nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask)


__all__ = ["attention"]
