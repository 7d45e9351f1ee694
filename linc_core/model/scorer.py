"""Candidate scorers: the base matching logit, the LINC comparator and the MLP ablations.

``baseline``: ``u_j = <h, E_j>``.

``linc`` (paper section 3; reference ``quotient_lite``):
    F = feasible customers (depot excluded). The selected consequence features phi are centred
    over F on the relative columns (``phi_j - mean_F phi``, applied to every row, so the
    depot's all-zero CVRPTW row becomes ``-mean``); the angle stays absolute. The summary
    ``r_t = [|F| / n, stats over F]`` and ``h`` give ``s = GELU(W_s [h; r_t])``, split into
    ``gamma = tanh(W_g s_1)``, ``beta = W_b s_2``, ``alpha = sigmoid(W_a s_3)``;
    ``h~ = h * (1 + gamma) + beta`` and ``u_j = alpha <h, E_j> + <h~, W_phi phi_j + b_phi>``.
    With summary ``none``: ``gamma = beta = 0``, ``alpha = 1``.

``mlp`` (ablations): ``u_j = <h, E_j> + MLP([h; phi_j])``, phi raw or centred on every column
with the depot row set to 0.

Every scorer returns raw scores u; the policy applies ``C * tanh(u / sqrt(d))`` and the mask.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linc_core.config import PROBLEM_FEATURES, ModelConfig


def feasible_customer_stats(
    phi: Tensor, feasible: Tensor, num_customers: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Masked statistics of the candidate features over the feasible customers.

    Args:
        phi: ``[B, K, N, P]`` features; feasible: ``[B, K, N]`` bool (depot column False).

    Returns:
        (``[B, K]`` feasible ratio ``max(|F|, 1) / n``, ``[B, K, P]`` mean over F (0 if empty),
        ``[B, K, P]`` min over F (0 if empty)).
    """
    weight = feasible.to(phi.dtype).unsqueeze(-1)  # [B, K, N, 1]
    count = weight.sum(-2)  # [B, K, 1]
    mean = (phi * weight).sum(-2) / count.clamp_min(1.0)
    minimum = phi.masked_fill(~feasible.unsqueeze(-1), float("inf")).amin(-2)
    minimum = torch.where(count > 0, minimum, torch.zeros_like(minimum))
    # |F| is floored at 1 in the ratio, as the reference does (rho = 1/n on an empty F, where
    # the paper's formula gives 0). Only the depot is feasible then, so the policy is the same
    # either way; the floor keeps our summaries equal to the reference's at every step.
    ratio = count.squeeze(-1).clamp_min(1.0) / max(num_customers, 1)
    return ratio, mean, minimum


def feasible_customers(mask: Tensor, has_depot: bool) -> Tensor:
    """``[B, K, N]`` the feasible set F: the mask with the depot column cleared."""
    if not has_depot:
        return mask
    feasible = mask.clone()
    feasible[..., 0] = False
    return feasible


class CandidateScorer(nn.Module):
    """One module for the three scorer kinds; the config decides which parts exist."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.embedding_dim
        self.kind = config.scorer
        table = PROBLEM_FEATURES[config.problem]
        self.register_buffer(
            "feature_index",
            torch.tensor([table.index(f) for f in config.candidate_features], dtype=torch.long),
            persistent=False,
        )
        centred = [f in config.effective_centred for f in config.candidate_features]
        self.register_buffer("centred_columns", torch.tensor(centred), persistent=False)
        self.zero_depot_row = config.depot_row == "zero"
        self.summary_mode = config.summary
        self.summary_columns = [
            (stat, table.index(feature)) for stat, feature in config.summary_stats
        ]
        p = len(config.candidate_features)
        if self.kind == "linc":
            self.full_phi_proj = nn.Linear(p, d, bias=config.phi_bias)
            if self.summary_mode != "none":
                summary_dim = 1 + len(self.summary_columns)
                hidden = config.scorer_hidden_dim
                self.summary_input_proj = nn.Linear(d + summary_dim, 3 * hidden)
                self.summary_to_gamma = nn.Linear(hidden, d)
                self.summary_to_beta = nn.Linear(hidden, d)
                self.summary_to_alpha = nn.Linear(hidden, 1)
        elif self.kind == "mlp":
            self.mlp_hidden = nn.Linear(d + p, config.scorer_hidden_dim)
            self.mlp_out = nn.Linear(config.scorer_hidden_dim, 1)

    def forward(
        self,
        context: Tensor,
        embeddings: Tensor,
        table: Tensor | None,
        mask: Tensor,
        has_depot: bool,
    ) -> Tensor:
        """Raw scores u.

        Args:
            context: ``[B, K, D]`` decoder context h.
            embeddings: ``[B, N, D]`` encoder output E.
            table: ``[B, K, N, F]`` the environment's full consequence table (None for the
                baseline scorer).
            mask: ``[B, K, N]`` bool feasibility.
            has_depot: node 0 is a depot (excluded from F).

        Returns:
            ``[B, K, N]``.
        """
        base = torch.matmul(context, embeddings.transpose(1, 2))  # [B, K, N]
        if self.kind == "baseline":
            return base
        assert table is not None
        table = table.to(context.dtype)
        feasible = feasible_customers(mask, has_depot)
        num_customers = mask.shape[-1] - int(has_depot)
        phi, ratio = self.centred_features(table, mask, has_depot)
        if self.kind == "mlp":
            hidden_context = nn.functional.linear(
                context, self.mlp_hidden.weight[:, : context.shape[-1]], self.mlp_hidden.bias
            )  # [B, K, Hm]: the context half of the first layer, once per rollout
            hidden = hidden_context.unsqueeze(2) + nn.functional.linear(
                phi, self.mlp_hidden.weight[:, context.shape[-1] :]
            )
            return base + self.mlp_out(nn.functional.gelu(hidden)).squeeze(-1)
        modulated, alpha = context, None
        if self.summary_mode != "none":
            summary = self.step_summary(table, feasible, num_customers, ratio)
            s = nn.functional.gelu(self.summary_input_proj(torch.cat([context, summary], dim=-1)))
            s_gamma, s_beta, s_alpha = s.chunk(3, dim=-1)
            gamma = torch.tanh(self.summary_to_gamma(s_gamma))
            beta = self.summary_to_beta(s_beta)
            alpha = torch.sigmoid(self.summary_to_alpha(s_alpha))  # [B, K, 1]
            modulated = context * (1.0 + gamma) + beta
        # <h~, W_phi phi_j + b> = phi_j . (W_phi^T h~) + <h~, b>: one shared weight per rollout.
        comparator = torch.matmul(modulated, self.full_phi_proj.weight)  # [B, K, P]
        local = (phi * comparator.unsqueeze(-2)).sum(-1)
        if self.full_phi_proj.bias is not None:
            local = local + (modulated * self.full_phi_proj.bias).sum(-1, keepdim=True)
        return (base if alpha is None else alpha * base) + local

    def centred_features(
        self, table: Tensor, mask: Tensor, has_depot: bool
    ) -> tuple[Tensor, Tensor]:
        """The scorer's candidate rows phi and the feasible ratio ``|F| / n``.

        Selects ``candidate_features`` from the full table, subtracts the feasible-customer
        mean on the centred columns (every row, the depot's included), then zeroes the depot
        row when ``depot_row == "zero"``.

        Args:
            table: ``[B, K, N, F]`` full consequence table; mask: ``[B, K, N]`` feasibility.

        Returns:
            (``[B, K, N, P]`` phi, ``[B, K]`` ratio).
        """
        feasible = feasible_customers(mask, has_depot)
        num_customers = mask.shape[-1] - int(has_depot)
        phi = table.index_select(-1, self.feature_index)  # [B, K, N, P]
        ratio, mean, _ = feasible_customer_stats(phi, feasible, num_customers)
        phi = phi - mean.unsqueeze(-2) * self.centred_columns.to(phi.dtype)
        if self.zero_depot_row and has_depot:
            phi = torch.cat([torch.zeros_like(phi[:, :, :1]), phi[:, :, 1:]], dim=2)
        return phi, ratio

    def step_summary(
        self, table: Tensor, feasible: Tensor, num_customers: int, ratio: Tensor | None = None
    ) -> Tensor:
        """``[B, K, 1 + S]`` r_t: the feasible ratio, then each (statistic, feature) over F."""
        columns = torch.tensor([c for _, c in self.summary_columns], device=table.device)
        picked = table.index_select(-1, columns)
        ratio_, mean, minimum = feasible_customer_stats(picked, feasible, num_customers)
        ratio = ratio_ if ratio is None else ratio
        stats = [
            mean[..., i] if stat == "mean" else minimum[..., i]
            for i, (stat, _) in enumerate(self.summary_columns)
        ]
        return torch.stack([ratio, *stats], dim=-1)
