"""Free drafts from the grammar: propose the text the grammar spells out, with no draft forward.

Much of a constrained output is fixed by the grammar: keys, quotes, colons, the tail of an enum
value. Wherever the admissible set is one token, that token has probability 1 under every
target p_t·Φ̂_t on the grammar. Where the admissible tokens all spell prefixes of one another's
text (``"`` / ``"na`` / ``"name"``: the grammar fixes the text, the tokenizer leaves the split
open), the longest of them is proposed. Either way the proposal is a point mass q = 1[token], so
the Leviathan rule accepts it with probability μ̂_t(token) and otherwise resamples from μ̂_t
without it: the verifier's law is unchanged (exact for any proposal), and a point mass on a
probability-1 token is always accepted.

Where the verifier's estimator already knows its law without a forward — exact Φ's explored
table holds μ*_t at every explored prefix (the exploration's own forwards times Φ) — the
proposal is drawn from that law instead: the draft then equals the target up to float rounding,
every token passes, and one target forward verifies a whole output.

:func:`grammar_run` computes a run from a sequence's state, :func:`known_run` draws from a known
law; :class:`GrammarCandidateGenerator` is a Transformers ``CandidateGenerator`` that drafts only
these (no draft model: one target forward verifies the run and samples the next branching token
itself). :class:`~hf_fvo.generation.GrammarAwareCandidateGenerator` interleaves them with a
draft model's tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from transformers.generation.candidate_generator import CandidateGenerator

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.generation.processors import FVOLogitsProcessor

__all__ = [
    "GrammarCandidateGenerator",
    "grammar_run",
    "known_run",
    "point_mass_logits",
    "verifier_temperature",
]

# admissible sets larger than this are branching points (a prefix chain is never this long)
_CHAIN_LIMIT = 32
# most tokens proposed in one round from a known law (it is the target's: all of them pass)
MAX_KNOWN_RUN = 256


# (tokenizer fingerprint, the estimator's kind, the longest token of a prefix chain) → the token
# the target wrote there last: where the grammar fixes the text but not its split, the split the
# model chose before under the same law is the best guess (under masking SmolLM2 writes `{"` as
# `{` + `"` although the vocabulary has `{"`; under μ* it writes `{"`). A guess from another law
# is not only rejected more often: it can lead an exact estimator into a subtree its table has
# not explored, whose Φ then costs forwards of its own.
_SPLITS: OrderedDict[tuple[str, str, int], int] = OrderedDict()
_SPLITS_SIZE = 100_000

Key = tuple[str, str, int] | None


def learn_splits(keys: list[Key], emitted: list[int]) -> None:
    """Remember the target's token at each chain point of a run it verified (positions after
    the first rejection were never reached: ``emitted`` stops there)."""
    for key, token in zip(keys, emitted, strict=False):
        if key is not None:
            _SPLITS[key] = token
            _SPLITS.move_to_end(key)
    while len(_SPLITS) > _SPLITS_SIZE:
        _SPLITS.popitem(last=False)


def grammar_run(
    processor: FVOLogitsProcessor, generated: tuple[int, ...], limit: int
) -> tuple[list[int], list[Key]]:
    """Up to ``limit`` tokens the grammar spells out after ``generated`` (the grammar's tokens
    so far): at each step the single admissible token or, where the admissible tokens' texts
    form a prefix chain (the text is fixed, its split is not), the split the target chose the
    last time it met that chain under the same kind of estimator (see :func:`learn_splits`),
    else the longest; the run stops at
    the first branching point or after EOS. Returns the run and, per token, the chain's key
    (``None`` where the token was the only one admissible).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import FVOLogitsProcessor
        >>> from hf_fvo.generation.grammar_draft import grammar_run
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["temperature", "tempo"], tok)
        >>> proc = FVOLogitsProcessor(g, prompt_length=0)
        >>> run, keys = grammar_run(proc, (), 8)
        >>> tok.decode(run)  # "temp" is common to both members
        'temp'
    """
    g = processor.grammar
    vocab = g.vocabulary
    eos = set(g.eos_token_ids)
    run: list[int] = []
    keys: list[Key] = []
    state = processor.state_of(generated)
    while len(run) < limit and state != g.terminal_state:
        mask = g.admissible(state, processor.remaining(len(generated) + len(run)))
        count = int(mask.sum())
        key = None
        if count == 1:
            token = int(mask.nonzero()[0, 0])
        elif 1 < count <= _CHAIN_LIMIT and vocab is not None:
            ids = mask.nonzero()[:, 0].tolist()
            texts = [vocab.token_bytes[i] if i < len(vocab) else None for i in ids]
            if any(t is None or i in eos for i, t in zip(ids, texts, strict=True)):
                break  # EOS or a special token: ending is a branch
            longest = max(range(len(ids)), key=lambda k: (len(texts[k]), -ids[k]))
            if not all(texts[longest].startswith(t) for t in texts):
                break
            key = (g.tokenizer_fingerprint, type(processor.estimator).__name__, ids[longest])
            seen = _SPLITS.get(key)
            token = seen if seen in ids else ids[longest]
        else:
            break
        run.append(token)
        keys.append(key)
        # through the processor's prefix cache: the verifier meets these states next
        state = processor.state_of(generated + tuple(run))
    return run, keys


def known_run(
    processor: FVOLogitsProcessor,
    row: list[int],
    limit: int,
    width: int,
    temperature: float | None = 1.0,
) -> tuple[list[int], torch.Tensor]:
    """Up to ``limit`` tokens drawn from the law the verifier's estimator already knows
    (:meth:`~hf_fvo.phi.PhiEstimator.known_law`: exact Φ's explored table holds μ*_t itself),
    stopping after EOS or where it knows no law. At ``temperature`` T the draw is from
    μ̂_t^{1/T} (the verifier's law at T when no other warper truncates it); ``None``: the argmax
    (greedy verification). Returns the tokens and their draft logits (1 × len(tokens) ×
    ``width``: the proposal's log-probabilities, −inf off each step's support). Empty for
    estimators that know no law without a forward.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import FVOLogitsProcessor
        >>> from hf_fvo.generation.grammar_draft import known_run
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> from hf_fvo.phi import ExactPhi
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> phi = ExactPhi(g, tiny_random_llama(len(tok)), tol=0.0)
        >>> proc = FVOLogitsProcessor(g, phi=phi, prompt_length=1)
        >>> known_run(proc, [1], 8, g.vocab_size)[0]  # nothing explored yet: nothing known
        []
        >>> _ = phi.root_exploration((1,))
        >>> run, logits = known_run(proc, [1], 8, g.vocab_size)
        >>> run[-1] == g.eos_token_id and tok.decode(run[:-1]) in {"yes", "no"}
        True
    """
    g = processor.grammar
    prompt, generated = processor.split(row)
    eos = set(g.eos_token_ids)
    run: list[int] = []
    laws: list[tuple[torch.Tensor, torch.Tensor]] = []
    while len(run) < limit:
        at = generated + tuple(run)
        law = processor.estimator.known_law(prompt, at, processor.remaining(len(at)))
        if law is None:
            break
        children, log_law = law
        if temperature is None:
            pick = torch.argmax(log_law)
        else:
            log_law = torch.log_softmax(log_law / temperature, 0)
            pick = torch.multinomial(log_law.exp(), 1)
        run.append(int(children[pick]))
        laws.append((children, log_law))
        if run[-1] in eos:
            break
    logits = torch.full((1, len(run), width), -torch.inf)
    for i, (children, log_law) in enumerate(laws):
        keep = children < width
        logits[0, i, children[keep]] = log_law[keep].float()
    return run, logits


def verifier_temperature(generation_config: Any) -> float | None:
    """The temperature the verifier samples at (``None``: greedy), for proposals from known
    laws (:func:`known_run`).

    Example:
        >>> from transformers import GenerationConfig
        >>> from hf_fvo.generation.grammar_draft import verifier_temperature
        >>> verifier_temperature(GenerationConfig(do_sample=True, temperature=0.7))
        0.7
        >>> verifier_temperature(GenerationConfig(do_sample=False)) is None
        True
    """
    if not generation_config.do_sample:
        return None
    return generation_config.temperature or 1.0


def point_mass_logits(tokens: list[int], width: int) -> torch.Tensor:
    """Draft logits (1 × len(tokens) × width) of point-mass proposals: 0 at each token, −inf
    elsewhere.

    Example:
        >>> from hf_fvo.generation.grammar_draft import point_mass_logits
        >>> point_mass_logits([2, 0], 3).softmax(-1).tolist()
        [[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]]
    """
    out = torch.full((1, len(tokens), width), -torch.inf)
    out[0, torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 0.0
    return out


class GrammarCandidateGenerator(CandidateGenerator):
    """Candidates from the grammar alone (no draft model), for Transformers' assisted decoding.

    Each round proposes :func:`known_run` where the verifier's estimator knows its law (exact
    Φ's table), else :func:`grammar_run` from the sequence's state as point masses; the
    target's forward verifies them and samples the token after them (or, at a branching point
    with no known law, just samples the next token, as plain decoding would).

    Args:
        processor: The target's :class:`~hf_fvo.generation.FVOLogitsProcessor`.
        width: The target's logits width (``model.config.vocab_size``).
        max_run: Most tokens proposed per round.
        stats: A :class:`~hf_fvo.generation.SpeculationStats` to fill (``free`` and
            ``accepted`` per round).

    Example:
        >>> import torch
        >>> import hf_fvo
        >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
        >>> tok = load_default_tokenizer()
        >>> model = tiny_random_llama(len(tok), eos_token_id=2)
        >>> g = hf_fvo.Grammar.from_choices(["temperature", "tempo"], tok)
        >>> out = hf_fvo.generate(model, torch.tensor([[1, 5]]), grammar=g, grammar_draft=True,
        ...                       max_new_tokens=8, do_sample=True, return_dict_in_generate=True)
        >>> tok.decode(out.sequences[0, 2:], skip_special_tokens=True) in {"temperature", "tempo"}
        True
        >>> out.speculation.free[0] > 0  # "temp" came without a draft forward
        True
    """

    def __init__(
        self, processor: FVOLogitsProcessor, width: int, max_run: int = 16, stats: Any = None
    ) -> None:
        from hf_fvo.generation.speculative import SpeculationStats

        if max_run < 1:
            raise InvalidArgumentError(f"max_run must be at least 1, got {max_run}")
        self.processor = processor
        self.width = int(width)
        self.max_run = int(max_run)
        self.max_length: int | None = None
        # the verifier's sampling temperature (None: greedy), for proposals from known laws
        self.temperature: float | None = 1.0
        self.stats = stats if stats is not None else SpeculationStats()
        self._round: tuple[int, list[int], list[Key]] = (0, [], [])

    def get_candidates(
        self, input_ids: torch.LongTensor, **kwargs: Any
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        proc = self.processor
        start = input_ids.shape[1]
        left = MAX_KNOWN_RUN if self.max_length is None else self.max_length - start - 1
        room = min(self.max_run, left)
        row = input_ids[0].tolist()
        # a known law's proposal always passes: propose as far as the budget goes
        run, logits = known_run(proc, row, min(left, MAX_KNOWN_RUN), self.width, self.temperature)
        if run:  # the verifier's own law, where its estimator knows it (exact Φ's table)
            keys: list[Key] = [None] * len(run)
        else:
            run, keys = grammar_run(proc, tuple(row[proc.prompt_length :]), room)
            logits = point_mass_logits(run, self.width)
        self.stats.proposed.append(0)
        self.stats.free.append(len(run))
        self.stats.drafted.append(len(run))
        self._round = (start, run, keys)
        if not run:
            return input_ids, None
        ids = torch.tensor([run], dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat([input_ids, ids], dim=1), logits.to(input_ids.device)

    def update_candidate_strategy(
        self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int
    ) -> None:
        start, run, keys = self._round
        new = input_ids[0, start:].tolist()
        learn_splits(keys, new)
        self.stats.accepted.append(common_prefix(new, run))
        self.stats.emitted.append(len(new))


def common_prefix(new: list[int], draft: list[int]) -> int:
    """Draft tokens the target kept: the common prefix (at the first rejection the target never
    samples the rejected token: Leviathan resamples from max(0, p − q), which is 0 there)."""
    n = 0
    while n < min(len(new), len(draft)) and new[n] == draft[n]:
        n += 1
    return n
