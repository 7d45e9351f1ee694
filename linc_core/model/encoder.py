"""POMO-style attention encoder with the optional GateAttn and Depth Mixer refinements.

Each layer: multi-head self-attention (no masking), add & instance norm, feed-forward (ReLU),
add & instance norm. GateAttn scales each head's attention output of token i by
``2 * sigmoid(W_gate x_i)`` (zero weight, bias 2 at initialisation). The Depth Mixer feeds layer
l a softmax mixture of all earlier layer outputs (the embedding included), weighted per token by
``<RMSNorm(v_m), q_l>`` with learned per-layer queries; the encoder's output is the last layer's.

``attention`` is the model's multi-head attention, the encoder's and the decoder's glimpse's:
``scaled_dot_product_attention``, in float32 on CPU under half-precision autocast. PyTorch's CPU
attention kernel in bf16 is no faster forward than in float32 and 7-10x slower backward at this
model's shapes (heads of 16 dimensions over 51 keys, one thread, 2026-11-28: forward and
backward 36.7 ms against 5.2 ms for 128 queries, 75.5 ms against 14.0 ms for 400), which made a
bf16 training step slower than a float32 one on a CPU whose bf16 matrix units run the linear
layers 4-6x faster. Attention is a small share of the model's multiply-adds, so there its inputs
are cast up; its float32 output is cast down again by autocast where a linear layer reads it.
On CUDA (and in float32 or float64) it runs as it is called.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig
from linc_core.model.features import NodeInputs, node_input_dim
from linc_core.problems.spec import problem_spec

_HALF = (torch.bfloat16, torch.float16)


def attention(query: Tensor, keys: Tensor, values: Tensor, mask: Tensor | None = None) -> Tensor:
    """``scaled_dot_product_attention``: ``[B, H, Q, E]`` from queries ``[B, H, Q, E]``, keys and
    values ``[B, H, N, E]`` and an optional bool ``mask`` broadcast to ``[B, H, Q, N]`` (True =
    may attend); in float32 on CPU under autocast or when an input is half precision (the
    module's reason)."""
    half = query.dtype in _HALF or keys.dtype in _HALF or values.dtype in _HALF
    if query.device.type == "cpu" and (half or torch.is_autocast_enabled("cpu")):
        with torch.autocast("cpu", enabled=False):
            return nn.functional.scaled_dot_product_attention(
                query.float(), keys.float(), values.float(), attn_mask=mask
            )
    return nn.functional.scaled_dot_product_attention(query, keys, values, attn_mask=mask)


class InstanceNormalization(nn.Module):
    """Instance norm over the nodes of each instance, per channel (affine, no running stats)."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.InstanceNorm1d(dim, affine=True, track_running_stats=False)

    def forward(self, x: Tensor) -> Tensor:  # [B, N, D]
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class RMSNorm(nn.Module):
    """``x * rsqrt(mean(x^2) + eps) * w``."""

    def __init__(self, dim: int, eps: float = 1e-8):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight


class EncoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        d, h = config.embedding_dim, config.num_heads
        self.num_heads = h
        self.Wq = nn.Linear(d, d, bias=False)
        self.Wk = nn.Linear(d, d, bias=False)
        self.Wv = nn.Linear(d, d, bias=False)
        self.multi_head_combine = nn.Linear(d, d)
        self.gate_mode = config.gate_mode if config.gated_attention else None
        if config.gated_attention:
            self.W_gate = nn.Linear(d, h)
            nn.init.zeros_(self.W_gate.weight)
            nn.init.constant_(self.W_gate.bias, config.gate_init_bias)
        self.norm_attention = InstanceNormalization(d)
        self.ff_in = nn.Linear(d, config.ff_hidden_dim)
        self.ff_out = nn.Linear(config.ff_hidden_dim, d)
        self.norm_ff = InstanceNormalization(d)

    def forward(self, x: Tensor) -> Tensor:
        """``[B, N, D] -> [B, N, D]``."""
        b, n, d = x.shape
        h = self.num_heads

        def heads(t: Tensor) -> Tensor:
            return t.view(b, n, h, d // h).transpose(1, 2)  # [B, H, N, D/H]

        # [B, H, N, D/H]
        attended = attention(heads(self.Wq(x)), heads(self.Wk(x)), heads(self.Wv(x)))
        if self.gate_mode is not None:
            gate = torch.sigmoid(self.W_gate(x))  # [B, N, H]
            if self.gate_mode == "centered_sigmoid":
                gate = 2.0 * gate
            attended = attended * gate.transpose(1, 2).unsqueeze(-1)
        combined = self.multi_head_combine(attended.transpose(1, 2).reshape(b, n, d))
        out = self.norm_attention(x + combined)
        return self.norm_ff(out + self.ff_out(torch.relu(self.ff_in(out))))


class Encoder(nn.Module):
    """Node embeddings ``E: [B, N, D]`` (depot first for CVRP/CVRPTW)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.embedding_dim
        self.has_depot = problem_spec(config.problem).has_depot
        if self.has_depot:
            self.embedding_depot = nn.Linear(2, d)
        self.embedding_node = nn.Linear(node_input_dim(config), d)
        self.static_residual = None
        if config.static_feature_mode == "residual" and config.node_static_features:
            self.static_residual = nn.Linear(len(config.node_static_features), d)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.depth_mixer = config.depth_mixer
        if config.depth_mixer:
            self.depth_key_norm = RMSNorm(d)
            self.depth_queries = nn.Parameter(
                torch.randn(config.encoder_layers, d) * (1.0 / math.sqrt(d))
            )

    def forward(self, inputs: NodeInputs) -> Tensor:
        x = self.embedding_node(inputs.nodes)  # [B, n, D]
        if self.static_residual is not None:
            x = x + self.static_residual(inputs.static)
        if self.has_depot:
            x = torch.cat([self.embedding_depot(inputs.depot).unsqueeze(1), x], dim=1)
        if not self.depth_mixer:
            for layer in self.layers:
                x = layer(x)
            return x
        history = [x]
        keys = [self.depth_key_norm(x)]
        for index, layer in enumerate(self.layers):
            values = torch.stack(history, dim=2)  # [B, N, M, D]
            scores = torch.einsum(
                "bnmd,d->bnm", torch.stack(keys, dim=2), self.depth_queries[index]
            )
            mixed = (scores.softmax(-1).unsqueeze(-1) * values).sum(2)
            out = layer(mixed)
            history.append(out)
            keys.append(self.depth_key_norm(out))
        return history[-1]
