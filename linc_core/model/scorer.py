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

Two forms of one function. :meth:`CandidateScorer.paper_scores` is the paper's section 3.4
written out line by line (each line cites its equation), for reading and for tests;
:meth:`CandidateScorer.forward` is the fast form training and decoding run, whose rewrites are
commented where they happen (the centring applied after the projection, ``1 + gamma`` as
``2 sigmoid(2x)``, beta folded into the projection, rows without a choice left out). The two
agree to 1e-10 in float64 for every scorer and variant (``tests/linc_core/model/test_scorer.py``).

Symbols (paper eq. numbers) -> attributes here (the reference checkpoint's names, kept so its
weights load unchanged):

| paper | here |
|---|---|
| h_t (decoder context) | ``context``, from ``linc_core.model.decoder.Decoder`` |
| k_{t,j} (candidate key) | ``embeddings[:, j]``: the encoder output E_j (single-head key) |
| b_{t,j} = <h_t, k_{t,j}> | ``base`` (eq. 1 and 8) |
| x_t(j) (eq. 4) | ``table[..., j, :]``, the environment's ``consequences`` |
| F_t and its size | ``feasible`` (mask without the depot), ``count`` |
| mu_t (eq. 2) | ``means`` over F_t on the relative columns |
| x_rel / x_abs | ``centred_features`` / the other ``candidate_features`` |
| phi_t(j) (eq. 3) | ``phi``: the selected features, relative ones minus mu_t |
| rho_t, r_t (eq. 5) | ``ratio``, ``step_summary`` (stats: ``config.summary_stats``) |
| eq. 6, the MLPs' shared first layer W_s | ``summary_input_proj`` (then GELU) |
| eq. 6, their second layers | ``summary_to_gamma``, ``summary_to_beta``, ``summary_to_alpha`` |
| gamma_t, beta_t, alpha_t | ``gamma``, ``beta``, ``alpha`` |
| h~_t (eq. 7) | ``modulated`` |
| W_phi, its bias b_phi | ``full_phi_proj.weight``, ``full_phi_proj.bias`` (footnote 1) |
| v_t = W_phi^T h~_t | ``comparator`` |
| u_{t,j} (eq. 8) | the returned scores |
| MLP([h; phi]) (ablations) | ``mlp_hidden``, ``mlp_out`` |
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from linc_core.config import ModelConfig
from linc_core.model.feasible_set import (
    FeasibleStats,
    feasible_customers,
    feasible_stats,
    feasible_weight,
    feature_major,
    masked_means,
    masked_minima,
)
from linc_core.problems.packing import choice_rows, scatter_rows
from linc_core.problems.protocol import CONSEQUENCE_FEATURES


class CandidateScorer(nn.Module):
    """One module for the three scorer kinds; the config decides which parts exist."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.embedding_dim
        self.kind = config.scorer
        table = CONSEQUENCE_FEATURES[config.problem]
        self.register_buffer(
            "feature_index",
            torch.tensor([table.index(f) for f in config.candidate_features], dtype=torch.long),
            persistent=False,
        )
        self.selects_all = tuple(config.candidate_features) == table
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
        if self.kind == "mlp":
            return base + self._mlp_scores(context, table, mask, has_depot)
        fm = feature_major(table.to(context.dtype))  # [B, K, F, N]
        feasible = feasible_customers(mask, has_depot)
        num_customers = mask.shape[-1] - int(has_depot)
        stats = feasible_stats(fm, feasible, num_customers)
        phi = fm if self.selects_all else fm.index_select(-2, self.feature_index)  # [B, K, P, N]
        shift = stats.means.index_select(-1, self.feature_index) * self.centred_columns.to(fm.dtype)
        comparator, offset, alpha = self.comparator(
            context, table, feasible, num_customers, mask.sum(-1), stats
        )
        local = (phi * comparator.unsqueeze(-1)).sum(-2)  # [B, K, N]
        # Centring moves every candidate by the same amount: one offset per rollout.
        local.add_(offset - (shift * comparator).sum(-1, keepdim=True))
        # Without a summary alpha = 1: the base logit enters whole (reference section 5,
        # no_step_summary: u = <h, E_j> + <h, W_phi phi_j + b_phi>).
        return local.add_(base) if alpha is None else torch.addcmul(local, alpha, base)

    def paper_scores(
        self,
        context: Tensor,
        embeddings: Tensor,
        table: Tensor | None,
        mask: Tensor,
        has_depot: bool,
    ) -> Tensor:
        """The scores of :meth:`forward`, computed as the paper writes them (section 3.4).

        Slow and plain: for reading and for the tests that hold the fast form to it. Same
        arguments and result as :meth:`forward` (``[B, K, N]``), except that rollouts with one
        feasible action are scored like the others (the fast form gives them neutral
        modulation on CPU; their one action has probability 1 either way).
        """
        h = context  # [B, K, D]
        base = h @ embeddings.transpose(1, 2)  # b_{t,j} = <h_t, k_{t,j}>, [B, K, N]
        if self.kind == "baseline":
            return base
        x = table.to(h.dtype).index_select(-1, self.feature_index)  # x_t(j), eq. 4: [B, K, N, P]
        in_f = feasible_customers(mask, has_depot).to(h.dtype).unsqueeze(-1)  # F_t: [B, K, N, 1]
        count = in_f.sum(-2)  # |F_t|: [B, K, 1]
        mu = (x * in_f).sum(-2) / count.clamp_min(1.0)  # eq. 2 (0 on an empty F_t): [B, K, P]
        relative = self.centred_columns.to(h.dtype)  # 1 on x_rel, 0 on x_abs
        phi = x - (mu * relative).unsqueeze(-2)  # eq. 3; the depot's zero row becomes -mu_t
        if self.zero_depot_row and has_depot:  # the centred-MLP ablation
            phi = torch.cat([torch.zeros_like(phi[:, :, :1]), phi[:, :, 1:]], dim=2)
        if self.kind == "mlp":  # u = b + MLP([h_t; phi_t(j)]) (the ablations, section 5)
            pairs = torch.cat([h.unsqueeze(2).expand(*phi.shape[:3], -1), phi], dim=-1)
            hidden = nn.functional.gelu(self.mlp_hidden(pairs))
            return base + self.mlp_out(hidden).squeeze(-1)
        if self.summary_mode == "none":  # gamma = beta = 0, alpha = 1
            modulated, alpha = h, torch.ones_like(h[..., :1])
        else:
            # r_t, eq. 5: rho_t then each statistic over F_t (0 on an empty F_t). rho_t floors
            # |F_t| at 1 as the reference does (``feasible_weight``).
            rho = count.clamp_min(1.0) / (mask.shape[-1] - int(has_depot))
            r = [rho]
            for stat, column in self.summary_columns:
                values = table[..., column].to(h.dtype).unsqueeze(-1)  # [B, K, N, 1]
                if stat == "mean":
                    r.append((values * in_f).sum(-2) / count.clamp_min(1.0))
                else:
                    lowest = values.masked_fill(in_f == 0, float("inf")).amin(-2)
                    r.append(torch.where(count > 0, lowest, torch.zeros_like(lowest)))
            r = torch.cat(r, dim=-1)  # [B, K, 1 + S]
            s = nn.functional.gelu(self.summary_input_proj(torch.cat([h, r], dim=-1)))
            s_gamma, s_beta, s_alpha = s.chunk(3, dim=-1)
            gamma = torch.tanh(self.summary_to_gamma(s_gamma))  # eq. 6
            beta = self.summary_to_beta(s_beta)  # eq. 6
            alpha = torch.sigmoid(self.summary_to_alpha(s_alpha))  # eq. 6
            modulated = h * (1 + gamma) + beta  # h~_t, eq. 7
        comparator = modulated @ self.full_phi_proj.weight  # v_t = W_phi^T h~_t: [B, K, P]
        local = (phi @ comparator.unsqueeze(-1)).squeeze(-1)  # v_t^T phi_t(j): [B, K, N]
        if self.full_phi_proj.bias is not None:  # <h~_t, b_phi>, footnote 1
            local = local + (modulated @ self.full_phi_proj.bias).unsqueeze(-1)
        return alpha * base + local  # eq. 8

    def _mlp_scores(self, context: Tensor, table: Tensor, mask: Tensor, has_depot: bool) -> Tensor:
        """``MLP([h; phi_j])`` ``[B, K, N]`` of the mlp scorers.

        The first layer splits into its context half (once per rollout) and its candidate half;
        one batched ``baddbmm`` adds the two over ``[B K, N, H]`` (a plain linear layer over P = 4
        to 6 inputs and a broadcast add cost twice as much on CPU). Without autograd the GELU
        runs in place.
        """
        b, k, d = context.shape
        phi, _ = self.centred_features(table, mask, has_depot)  # [B, K, N, P]
        n, p = phi.shape[-2:]
        weight = self.mlp_hidden.weight  # [H, D + P]
        hidden_context = nn.functional.linear(context, weight[:, :d], self.mlp_hidden.bias)
        hidden = torch.baddbmm(
            hidden_context.reshape(b * k, 1, -1),
            phi.to(context.dtype).reshape(b * k, n, p),
            weight[:, d:].t().expand(b * k, p, -1),
        )  # [B K, N, H]
        if torch.is_grad_enabled():
            hidden = nn.functional.gelu(hidden)
        else:
            hidden = torch.ops.aten.gelu_(hidden)
        out = torch.matmul(hidden, self.mlp_out.weight.squeeze(0)) + self.mlp_out.bias
        return out.view(b, k, n)

    def comparator(
        self,
        context: Tensor,
        table: Tensor,
        feasible: Tensor,
        num_customers: int,
        feasible_count: Tensor,
        stats: FeasibleStats | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """The LINC comparator of one step: the weights the local score gives each feature.

        The local score of candidate j is ``sum_p v_p phi_pj + offset`` (before centring), and
        the total score ``alpha * h^T e_j + local`` when there is a summary. ``forward`` uses
        this; ``linc_core.evaluate.diagnostics`` calls it to probe the comparator directly.

        ``h~ = h * (1 + gamma) + beta`` enters the score only through ``W_phi^T h~`` and
        ``<h~, b_phi>``, and beta is affine in its hidden input, so the beta branch is folded
        into ``[W_phi | b_phi]^T W_beta`` (P + 1 rows instead of d): the same function with a
        d x d matmul fewer per step. ``1 + tanh(x) = 2 sigmoid(2x)`` gives ``1 + gamma``
        directly (tanh is several times slower than sigmoid on CPU).

        Args:
            context: ``[B, K, D]`` decoder context h.
            table: ``[B, K, N, F]`` consequence table of the step.
            feasible: ``[B, K, N]`` the feasible set F (the depot column cleared).
            num_customers: customers per instance n.
            feasible_count: ``[B, K]`` feasible actions per rollout (depot included).
            stats: the step's ``FeasibleStats``, when the caller has them.

        Returns:
            ``(v, offset, alpha)``: the comparator ``v = W_phi^T h~`` ``[B, K, P]``, the offset
            ``<h~, b_phi>`` ``[B, K, 1]`` (zeros without a bias) and the gate alpha
            ``[B, K, 1]`` (None without a summary).
        """
        # [W_phi | b_phi]^T as contiguous rows [P(+1), D]: a GEMM with P + 1 = 7 output columns
        # runs twice as fast on CPU reading its weight this way round as from [D, P + 1].
        projection = self.full_phi_proj.weight.t()
        if self.full_phi_proj.bias is not None:
            projection = torch.cat([projection, self.full_phi_proj.bias.unsqueeze(0)])
        projection = projection.contiguous()
        if self.summary_mode == "none":
            extended = nn.functional.linear(context, projection)
            alpha = None
        else:
            lead = context.shape[:2]
            summary = self.step_summary(table, feasible, num_customers, stats)
            inputs = torch.cat([context, summary], dim=-1).flatten(0, 1)  # [R, D + S]
            rows = choice_rows(feasible_count)
            if rows is not None:  # modulate only rollouts that have a choice to make
                inputs = inputs.index_select(0, rows)
            # Without autograd no intermediate is needed again: GELU and the scaling in place.
            in_place = not torch.is_grad_enabled()
            s = self.summary_input_proj(inputs)  # [R, 3H]
            s = torch.ops.aten.gelu_(s) if in_place else nn.functional.gelu(s)
            # One split, not three slices: the slices' backward would zero-fill a [R, 3H]
            # gradient three times, which costs as much as a GEMM of the dense replay.
            s_gamma, s_beta, s_alpha = s.split(s.shape[-1] // 3, dim=-1)
            gamma = self.summary_to_gamma
            # (1 + gamma) / 2 = sigmoid(2 (W s + b)): the 2 folded into the (small) weights
            half_scale = torch.addmm(2.0 * gamma.bias, s_gamma, 2.0 * gamma.weight.t()).sigmoid_()
            alpha = torch.sigmoid(
                nn.functional.linear(
                    s_alpha, self.summary_to_alpha.weight, self.summary_to_alpha.bias
                )
            )
            folded_weight = projection @ self.summary_to_beta.weight  # [P(+1), H]
            folded_bias = projection @ self.summary_to_beta.bias  # [P(+1)]
            beta_part = torch.addmm(folded_bias, s_beta, folded_weight.t())
            if rows is not None:
                # A forced rollout's scores do not matter (its one action has probability 1
                # whatever they are); neutral values keep them finite.
                total = lead[0] * lead[1]
                half_scale = scatter_rows(half_scale, rows, total, 0.5)
                alpha = scatter_rows(alpha, rows, total, 1.0)
                beta_part = scatter_rows(beta_part, rows, total, 0.0)
            flat_context = context.reshape(-1, context.shape[-1])
            scaled_context = (
                half_scale.mul_(flat_context) if in_place else half_scale * flat_context
            )
            extended = torch.addmm(beta_part, scaled_context, 2.0 * projection.t())
            extended = extended.view(*lead, -1)
            alpha = alpha.view(*lead, 1)
        p = self.full_phi_proj.weight.shape[1]
        if self.full_phi_proj.bias is None:
            return extended, extended.new_zeros(extended.shape[:-1] + (1,)), alpha
        return extended[..., :p], extended[..., p:], alpha

    def _summary(self, fm: Tensor, feasible: Tensor, stats: FeasibleStats) -> Tensor:
        columns = [
            stats.means[..., c]
            if stat == "mean"
            else masked_minima(fm[:, :, c], stats.weight, stats.count)
            for stat, c in self.summary_columns
        ]
        return torch.stack([stats.ratio, *columns], dim=-1)

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
        fm = feature_major(table)
        weight, count, ratio = feasible_weight(feasible, fm.dtype, num_customers)
        phi = fm.index_select(-2, self.feature_index)  # [B, K, P, N]
        shift = masked_means(phi, weight, count) * self.centred_columns.to(fm.dtype)
        phi = (phi - shift.unsqueeze(-1)).transpose(-1, -2)  # [B, K, N, P]
        if self.zero_depot_row and has_depot:
            phi = torch.cat([torch.zeros_like(phi[:, :, :1]), phi[:, :, 1:]], dim=2)
        return phi, ratio

    def step_summary(
        self,
        table: Tensor,
        feasible: Tensor,
        num_customers: int,
        stats: FeasibleStats | None = None,
    ) -> Tensor:
        """``[B, K, 1 + S]`` r_t: the feasible ratio, then each (statistic, feature) over F.

        Args:
            stats: the table's ``FeasibleStats``, when the caller has them.
        """
        fm = feature_major(table)
        if stats is None:
            stats = feasible_stats(fm, feasible, num_customers)
        return self._summary(fm, feasible, stats)
