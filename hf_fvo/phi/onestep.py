"""OneStep-cheap (seed 000, Def. 9): Φ̂(y) = Σ_{u ∈ A_{t+1}(x y)} p_t(u), from the logits at hand.

No forward pass: the current distribution p_t stands in for p(· | x, y). The sum is taken once
per distinct next state (a state has few; the grouped transition table gives them), so the cost
is one gather-sum per next state, never a loop over the vocabulary.
"""

from __future__ import annotations

import torch

from hf_fvo.phi.base import PhiContext, PhiEstimator, admissible_mask, no_dead_row

__all__ = ["OneStepPhi"]


class OneStepPhi(PhiEstimator):
    """Allowed probability mass at each candidate's next state, under the current logits.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import OneStepPhi, PhiContext
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> logits = torch.zeros(g.vocab_size)
        >>> logits[tok.convert_tokens_to_ids("o")] = 20.0  # the model loves "o"
        >>> phi = OneStepPhi(g).log_phi(PhiContext(g.initial_state, (), logits)).exp()
        >>> phi[tok.convert_tokens_to_ids("n")] > 0.99 > phi[tok.convert_tokens_to_ids("y")]
        tensor(True)
    """

    name = "onestep"

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        g = self.grammar
        logp = torch.log_softmax(ctx.logits.double(), dim=-1)
        mask = admissible_mask(g, ctx.state, ctx.remaining)
        out = torch.full(mask.shape, -torch.inf, dtype=torch.float64)
        if g.is_accepting(ctx.state):
            out[list(g.eos_token_ids)] = 0.0  # Φ(EOS) = 1: the text is complete
        after = None if ctx.remaining is None else ctx.remaining - 1
        groups = g.transitions(ctx.state)
        for k, nxt in enumerate(groups.next_states.tolist()):
            a, b = int(groups.offsets[k]), int(groups.offsets[k + 1])
            tokens = groups.token_ids[a:b]
            tokens = tokens[mask[tokens]]
            if len(tokens) == 0:
                continue
            allowed_next = admissible_mask(g, nxt, after)
            out[tokens] = torch.logsumexp(logp[: allowed_next.shape[0]][allowed_next], 0)
        return no_dead_row(out, mask)
