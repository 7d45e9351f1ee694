"""A policy as the rollout engine's choice rule, and the record of the decisions it took.

``PolicyChooser`` is what ``linc_core.problems.rollout.complete_rollouts`` calls at every
decision: it reads the state (``ScoringPolicy.step_inputs``), scores the candidates, turns the
scores into log-probabilities and lets a choice rule (``linc_core.model.sampling``) pick the
actions. Training, validation, sampling, multi-start and SGBS differ only in the choice rule and
in what they keep (the log-likelihood, the trajectory for a later replay).

``decide_all`` is a decision of every rollout as pure tensor code, the step ``torch.compile``
takes whole (``compiled=True``, with the environment's ``transition``); ``decide_packed`` is the
same for a selection of the rollouts, the CPU saving (rollouts with one feasible action left out
of the model), with the selection and the scatters back inside the function.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from linc_core.model.sampling import Pick
from linc_core.model.types import Encoded, ScoringPolicy, StepInputs, Trajectory, morph_scores
from linc_core.problems.packing import first_true, first_where, prunes_rows
from linc_core.problems.protocol import RolloutState, RoutingEnv, StateT
from linc_core.utils.compiling import compile_step, mask_values, read_mask_values


def decide_all(
    chooser: PolicyChooser,
    state: RolloutState,
    step: int | Tensor,
    mask: Tensor | None = None,
    z: Tensor | None = None,
    positions: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """Every rollout's decision at ``state``: (``[B, K]`` actions, ``[B, K]`` their
    log-probabilities, ``[B, K, N]`` the morph base scores or None).

    A forced rollout (finished ones included) gets its one action with log-probability 0.

    Args:
        mask: ``state.mask`` as 0/1 floats, read in its place (a compiled step on CPU, whose
            vectorised loops read floats several times faster than bools:
            ``linc_core.utils.compiling.mask_values``); None: ``state.mask``.
        z: the z-vectors of ``state``'s rollouts (default: the chooser's).
        positions: ``[B, K]`` which of the chooser's rollouts ``state`` holds (a packed
            selection; the sampler's noise follows the rollout), None: all, in order.
    """
    state = read_mask_values(state, mask)
    _, log_probs, base = chooser.evaluate(state, z)
    action = chooser.pick(log_probs.detach(), step, positions)
    return action, log_probs.gather(-1, action.unsqueeze(-1)).squeeze(-1), base


def decide_packed(
    chooser: PolicyChooser,
    state: RolloutState,
    step: int | Tensor,
    mask: Tensor | None,
    positions: Tensor,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``decide_all`` of the rollouts ``positions`` of ``state``; every other rollout takes its
    one feasible action (log-probability 0). Returns what ``decide_all`` returns, for all K.

    The selection (every state field's gather, the z-vectors', the scatters back) is part of
    the function, so that a compiled step fuses the gathers into the loops that read them
    instead of copying each field before the graph (on CPU, 0.3 s of glue in a compiled
    decode of C101 and R101 at z=128 x8, as much as its transition graph).

    Args:
        mask: ``[B, K, N]`` ``state.mask`` as 0/1 floats (``mask_values``: a compiled step),
            or None: ``state.mask`` as it is.
        positions: ``[B, K']`` distinct rollouts per instance (``first_where``: those with a
            choice first, then forced ones as padding, which the choice rule also sends to
            their one action).
    """
    z = chooser.z
    if z is not None:
        z = z.gather(1, positions.unsqueeze(-1).expand(-1, -1, z.shape[-1]))
    packed_mask = None
    if mask is not None:
        packed_mask = mask.gather(1, positions.unsqueeze(-1).expand(-1, -1, mask.shape[-1]))
    decided, log_prob, packed_base = decide_all(
        chooser, state.select(positions), step, packed_mask, z, positions
    )
    action = first_true(state.mask if mask is None else mask).scatter(1, positions, decided)
    chosen = log_prob.new_zeros(action.shape).scatter(1, positions, log_prob)
    base = None
    if packed_base is not None:
        base = packed_base.new_zeros(state.mask.shape)
        base = base.scatter(1, positions.unsqueeze(-1).expand_as(packed_base), packed_base)
    return action, chosen, base


def env_transition(env: RoutingEnv[StateT], state: StateT, action: Tensor) -> StateT:
    """``env.step(state, action)`` as a plain function (what ``compile_step`` compiles)."""
    return env.step(state, action)


class PolicyChooser:
    """``choose(state, step) -> [B, K]`` actions of ``policy`` for the rollout engine.

    Args:
        policy: the model.
        env: the environment being decoded (its instance is the one ``encoded`` encodes).
        encoded: ``policy.encode(env.instance)``.
        z: ``[B, K, z_dim]`` z-vectors, or None for a model without z.
        pick: the choice rule, called with the detached log-probabilities.
        morph: ``(frozen policy, lambda)``: scores ``u_0 + lambda (u - u_0)``, u_0 the frozen
            policy's scores of the same states (paper section 3.4).
        track_log_likelihood: accumulate ``log_likelihood`` ``[B, K]`` (with gradients when
            autograd is on).
        keep_trajectory: record every decision in ``trajectory``.
        skip_forced: run the model only for the rollouts that have a choice (at least two
            feasible actions), packed per instance; the others take their one feasible action
            (probability 1: the same action and log-likelihood, about a third less model work
            on CVRPTW n=50). Off when every rollout's scores are wanted (the diagnostics).
            None (default): on where it pays, on CPU (``linc_core.problems.packing.prunes_rows``).
        compiled: decide with ``decide_all`` and ``decide_packed`` under ``torch.compile``
            (``compile_step``) and offer the compiled environment step as ``transition`` for
            the rollout engine. With ``skip_forced`` the packed width is read on the host and
            the rollouts to decide are sorted out there (``first_where``); their selection runs
            in the graph, whose packed width is a symbolic size (one more compile when it first
            changes, then none). Without it (CUDA) every shape is fixed, as CUDA graphs need.
            Same actions and log-likelihoods as eager up to float rounding of the fused
            arithmetic.
    """

    def __init__(
        self,
        policy: ScoringPolicy,
        env: RoutingEnv,
        encoded: Encoded,
        z: Tensor | None,
        pick: Pick,
        *,
        morph: tuple[ScoringPolicy, float] | None = None,
        track_log_likelihood: bool = True,
        keep_trajectory: bool = False,
        skip_forced: bool | None = None,
        compiled: bool = False,
    ):
        self.policy = policy
        self.env = env
        self.cache, self.time_scale = encoded
        self.z = z
        self.pick = pick
        self.has_depot = env.instance.has_depot
        self.morph = morph
        device = env.instance.device
        if skip_forced is None:
            skip_forced = prunes_rows(device)
        self.skip_forced = skip_forced
        self.compiled = compiled
        self._decide = decide_all
        self._decide_packed = decide_packed
        if compiled:
            # Shapes fixed without the packing (as CUDA graphs need); with it, a dimension
            # that changes (the packed width; K and N between decodes) goes symbolic once.
            dynamic = None if skip_forced else False
            self._decide = compile_step(decide_all, device, dynamic=dynamic)
            if skip_forced:
                self._decide_packed = compile_step(decide_packed, device, dynamic=None)
        self.transition = env.step
        if compiled:  # masks and counts: scalar loops on CPU (``SCALAR_LOOPS``)
            transition = compile_step(env_transition, device, vectorise=False)
            self.transition = functools.partial(transition, env)
        if morph is not None:
            with torch.no_grad():
                self.morph_encoded = morph[0].encode(env.instance)
        embeddings = self.cache.embeddings
        b, k = env.batch_size, env.num_rollouts
        self.log_likelihood: Tensor | None = None
        if track_log_likelihood:
            self.log_likelihood = torch.zeros(
                b, k, dtype=embeddings.dtype, device=embeddings.device
            )
        self.trajectory: Trajectory | None = None
        if keep_trajectory:
            self.trajectory = Trajectory(
                env=env,
                time_scale=self.time_scale,
                states=[],
                actions=[],
                morph_base_scores=[] if morph is not None else None,
                z=z,
                has_depot=self.has_depot,
                morph_lambda=morph[1] if morph is not None else None,
            )

    def evaluate(
        self, state: RolloutState, z: Tensor | None = None
    ) -> tuple[StepInputs, Tensor, Tensor | None]:
        """(step inputs, ``[B, K, N]`` log-probabilities, the morph base scores or None) at
        ``state`` (``z``: the z-vectors of its rollouts, default the chooser's)."""
        policy = self.policy
        z = self.z if z is None else z
        inputs = policy.step_inputs(self.env, state, self.time_scale, self.cache.embeddings.dtype)
        scores = policy.scores(inputs, self.cache, z, self.has_depot)
        base = None
        if self.morph is not None:
            frozen, morph_lambda = self.morph
            with torch.no_grad():
                base = frozen.step_scores(
                    self.env, state, self.morph_encoded.cache, self.morph_encoded.time_scale, z
                )
            scores = morph_scores(base, scores, morph_lambda)
        return inputs, policy.log_probs(scores, state.mask), base

    def __call__(self, state: RolloutState, step: int) -> Tensor:
        k = state.mask.shape[1]
        if self.skip_forced:
            choice = state.mask.sum(-1) > 1  # [B, K]
            width = int(choice.sum(-1).max())
        else:
            width = k
        # A compiled step takes the decision index as a tensor (one graph for every step) and
        # the mask as floats (``decide_all``).
        at = torch.full((), step, device=state.mask.device) if self.compiled else step
        if width == k:
            mask = mask_values(state.mask) if self.compiled else None
            action, chosen, base = self._decide(self, state, at, mask, self.z)
        elif width > 0:
            positions = first_where(choice, width)  # [B, K']
            mask = mask_values(state.mask) if self.compiled else None
            action, chosen, base = self._decide_packed(self, state, at, mask, positions)
        else:  # every rollout forced: its one feasible action, no model
            action, chosen = first_true(state.mask), None
            base = None if self.morph is None else self.cache.embeddings.new_zeros(state.mask.shape)
        if self.log_likelihood is not None and chosen is not None:
            self.log_likelihood = self.log_likelihood + chosen
        if self.trajectory is not None:
            self.trajectory.states.append(state)
            self.trajectory.actions.append(action)
            if self.trajectory.morph_base_scores is not None:
                self.trajectory.morph_base_scores.append(base)
        return action


__all__ = ["PolicyChooser", "decide_all", "decide_packed", "env_transition"]
