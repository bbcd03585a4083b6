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
law; :class:`GrammarProposals` is the round both candidate generators share (propose these runs,
book the target's verdict). :class:`GrammarCandidateGenerator` is a Transformers
``CandidateGenerator`` that drafts only these (no draft model: one target forward verifies the
run and samples the next branching token itself);
:class:`~hf_fvo.generation.GrammarAwareCandidateGenerator` interleaves them with a draft model's
tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.generation.candidate_generator import CandidateGenerator

from hf_fvo.errors import check_int
from hf_fvo.generation.processors import FVOLogitsProcessor
from hf_fvo.lru import LRU

__all__ = [
    "GrammarCandidateGenerator",
    "GrammarProposals",
    "SpeculationStats",
    "grammar_run",
    "known_run",
    "point_mass_logits",
    "verifier_temperature",
]

# admissible sets larger than this are branching points (a prefix chain is never this long)
_CHAIN_LIMIT = 32
# most tokens proposed in one round from a known law (it is the target's: all of them pass)
MAX_KNOWN_RUN = 256


# Splits: (tokenizer fingerprint, the estimator's kind, the longest token of a prefix chain) →
# the token the target wrote there last. Where the grammar fixes the text but not its split, the
# split the model chose before under the same law is the best guess (under masking SmolLM2
# writes `{"` as `{` + `"` although the vocabulary has `{"`; under μ* it writes `{"`). A guess
# from another law is not only rejected more often: it can lead an exact estimator into a
# subtree its table has not explored, whose Φ then costs forwards of its own. hf_fvo.generate
# keeps them on the target model (hf_fvo.models.memory, table "splits").
SPLITS_KEPT = 100_000

Key = tuple[str, str, int] | None
Splits = LRU[tuple[str, str, int], int]


@dataclass
class SpeculationStats:
    """Per-round draft and accept counts of one assisted ``generate`` call.

    ``proposed`` counts the tokens the draft model sampled; ``free`` the tokens the grammar
    spelled out (proposed without a draft forward, see
    :mod:`hf_fvo.generation.grammar_draft`); ``drafted`` those sent to the target (free ones
    included; a blind draft is cut at its first token outside the grammar, which the target
    would reject anyway); ``accepted`` the candidate tokens the target kept; ``emitted`` the
    tokens the round added to the output (the accepted ones plus the target's own, unless an
    accepted EOS or the length limit ended generation).

    Example:
        >>> from hf_fvo.generation import SpeculationStats
        >>> stats = SpeculationStats(proposed=[4, 4], drafted=[4, 2], accepted=[4, 1],
        ...                          emitted=[5, 2], free=[0, 0])
        >>> stats.acceptance_rate, stats.rounds, stats.tokens_per_round
        (0.625, 2, 3.5)
    """

    proposed: list[int] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    emitted: list[int] = field(default_factory=list)
    free: list[int] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.accepted)

    @property
    def candidates(self) -> int:
        """Candidate tokens offered to the target: the draft model's and the grammar's."""
        return sum(self.proposed) + sum(self.free)

    @property
    def acceptance_rate(self) -> float:
        """Accepted ÷ :attr:`candidates` (nan before the first round)."""
        total = self.candidates
        return sum(self.accepted) / total if total else float("nan")

    @property
    def tokens_per_round(self) -> float:
        """Mean tokens emitted per target forward."""
        return sum(self.emitted) / self.rounds if self.rounds else float("nan")


def grammar_run(
    processor: FVOLogitsProcessor,
    generated: tuple[int, ...],
    limit: int,
    splits: Splits | None = None,
) -> tuple[list[int], list[Key]]:
    """Up to ``limit`` tokens the grammar spells out after ``generated`` (the grammar's tokens
    so far): at each step the single admissible token or, where the admissible tokens' texts
    form a prefix chain (the text is fixed, its split is not), the split the target chose the
    last time it met that chain under the same kind of estimator (in ``splits``), else the
    longest; the run stops at the first branching point or after EOS. Returns the run and, per
    token, the chain's key (``None`` where the token was the only one admissible).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import FVOLogitsProcessor
        >>> from hf_fvo.generation.drafts import grammar_run
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["temperature", "tempo"], tok)
        >>> proc = FVOLogitsProcessor(g, prompt_length=0)
        >>> run, keys = grammar_run(proc, (), 8)
        >>> tok.decode(run)  # every admissible first token spells a prefix of "temperature"
        'temperature<|im_end|>'
        >>> from hf_fvo.lru import LRU
        >>> splits = LRU(16)
        >>> splits.put(keys[0], tok.convert_tokens_to_ids("temp"))  # the target chose "temp"
        >>> tok.decode(grammar_run(proc, (), 8, splits)[0])  # then "o" and "e…" branch
        'temp'
    """
    rows = processor.tracker
    g = rows.grammar
    vocab = g.vocabulary
    eos = set(g.eos_token_ids)
    run: list[int] = []
    keys: list[Key] = []
    while len(run) < limit and not rows.is_finished(generated + tuple(run)):
        # through the tracker's prefix memory: the verifier meets these states next
        mask = rows.admissible(generated + tuple(run))
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
            seen = None if splits is None else splits.get(key)
            token = seen if seen in ids else ids[longest]
        else:
            break
        run.append(token)
        keys.append(key)
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
        >>> from hf_fvo.generation.drafts import known_run
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
    prompt, generated = processor.tracker.split(row)
    eos = set(g.eos_token_ids)
    run: list[int] = []
    laws: list[tuple[torch.Tensor, torch.Tensor]] = []
    while len(run) < limit:
        at = generated + tuple(run)
        law = processor.estimator.known_law(prompt, at, processor.tracker.remaining(len(at)))
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
        >>> from hf_fvo.generation.drafts import verifier_temperature
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
        >>> from hf_fvo.generation.drafts import point_mass_logits
        >>> point_mass_logits([2, 0], 3).softmax(-1).tolist()
        [[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]]
    """
    out = torch.full((1, len(tokens), width), -torch.inf)
    out[0, torch.arange(len(tokens)), torch.tensor(tokens, dtype=torch.long)] = 0.0
    return out


class GrammarProposals:
    """The free part of a speculation round, shared by both candidate generators: propose what
    the verifier's estimator knows (:func:`known_run`) or what the grammar spells out
    (:func:`grammar_run`), book the proposal, then book the target's verdict (tokens kept,
    learned splits, per-round counts in :attr:`stats`).

    Args:
        processor: The target's :class:`~hf_fvo.generation.FVOLogitsProcessor` (the verifier).
        width: The logits width of proposals (the target's ``model.config.vocab_size``).
        temperature: The verifier's sampling temperature (``None``: greedy), for proposals
            from known laws.
        splits: Where the target's token splits are remembered (``None``: propose the longest).
        stats: Filled with per-round counts (a fresh :class:`SpeculationStats` by default).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.generation import FVOLogitsProcessor, GrammarProposals
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["temperature", "tempo"], tok)
        >>> free = GrammarProposals(FVOLogitsProcessor(g, prompt_length=1), g.vocab_size)
        >>> run, keys = free.spelled([1], room=8)
        >>> free.begin(1, run, keys, free=len(run))
        >>> free.end([1, *run, tok.convert_tokens_to_ids("o")])  # the target kept the run
        2
        >>> free.stats.accepted, free.stats.emitted
        ([2], [3])
    """

    def __init__(
        self,
        processor: FVOLogitsProcessor,
        width: int,
        *,
        temperature: float | None = 1.0,
        splits: Splits | None = None,
        stats: SpeculationStats | None = None,
    ) -> None:
        self.processor = processor
        self.width = int(width)
        self.temperature = temperature
        self.splits = splits
        self.stats = stats if stats is not None else SpeculationStats()
        self._round: tuple[int, list[int], list[Key]] = (0, [], [])

    def known(self, row: list[int], room: int) -> tuple[list[int], torch.Tensor] | None:
        """Up to ``room`` tokens from the law the verifier knows without a forward, with their
        draft logits; ``None`` where it knows none."""
        if room < 1:
            return None
        run, logits = known_run(self.processor, row, room, self.width, self.temperature)
        return (run, logits) if run else None

    def spelled(self, row: list[int], room: int) -> tuple[list[int], list[Key]]:
        """Up to ``room`` tokens the grammar spells out after ``row`` and their chain keys."""
        if room < 1:
            return [], []
        _, generated = self.processor.tracker.split(row)
        return grammar_run(self.processor, generated, room, self.splits)

    def begin(
        self, start: int, run: list[int], keys: list[Key], *, proposed: int = 0, free: int = 0
    ) -> None:
        """Book a round's proposal: ``run`` after ``start`` columns, ``proposed`` of its tokens
        sampled by a draft model, ``free`` spelled out or drawn from a known law."""
        self.stats.proposed.append(proposed)
        self.stats.free.append(free)
        self.stats.drafted.append(len(run))
        self._round = (start, run, keys)

    def end(self, ids: list[int]) -> int:
        """Book the target's verdict (``ids``: the sequence after the round); returns how many
        proposed tokens it kept."""
        start, run, keys = self._round
        new = ids[start:]
        if self.splits is not None:  # positions after the first rejection were never reached
            for key, token in zip(keys, new, strict=False):
                if key is not None:
                    self.splits.put(key, token)
        accepted = common_prefix(new, run)
        self.stats.accepted.append(accepted)
        self.stats.emitted.append(len(new))
        return accepted


class GrammarCandidateGenerator(CandidateGenerator):
    """Candidates from the grammar alone (no draft model), for Transformers' assisted decoding.

    Each round proposes :func:`known_run` where the verifier's estimator knows its law (exact
    Φ's table), else :func:`grammar_run` from the sequence's state as point masses; the
    target's forward verifies them and samples the token after them (or, at a branching point
    with no known law, just samples the next token, as plain decoding would).

    Args:
        processor: The target's :class:`~hf_fvo.generation.FVOLogitsProcessor`.
        width: The target's logits width (``model.config.vocab_size``).
        max_run: Most tokens spelled out per round (a known law's proposal always passes, so it
            runs as far as the budget goes, at most 256 tokens).
        stats: A :class:`~hf_fvo.generation.SpeculationStats` to fill (``free`` and
            ``accepted`` per round).
        splits: Where the target's token splits are remembered (``hf_fvo.generate`` passes the
            target model's memory).
        max_length: The length generation stops at (Transformers' ``max_length``).
        temperature: The verifier's sampling temperature (``None``: greedy).

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
        self,
        processor: FVOLogitsProcessor,
        width: int,
        max_run: int = 16,
        stats: SpeculationStats | None = None,
        *,
        splits: Splits | None = None,
        max_length: int | None = None,
        temperature: float | None = 1.0,
    ) -> None:
        self.max_run = check_int("max_run", max_run, minimum=1)
        self.max_length = max_length
        self.free = GrammarProposals(
            processor, width, temperature=temperature, splits=splits, stats=stats
        )

    @property
    def stats(self) -> SpeculationStats:
        return self.free.stats

    @property
    def num_drafting_tokens(self) -> int:
        """Most tokens one round proposes (Transformers ≥ 5.25 keeps that many steps of a
        recurrent cache to roll back)."""
        return max(MAX_KNOWN_RUN, self.max_run)

    def get_candidates(
        self, input_ids: torch.LongTensor, **kwargs: Any
    ) -> tuple[torch.LongTensor, torch.Tensor | None]:
        start = input_ids.shape[1]
        left = MAX_KNOWN_RUN if self.max_length is None else self.max_length - start - 1
        row = input_ids[0].tolist()
        # a known law's proposal always passes: propose as far as the budget goes
        known = self.free.known(row, min(left, MAX_KNOWN_RUN))
        if known is not None:  # the verifier's own law, where its estimator knows it
            run, logits = known
            keys: list[Key] = [None] * len(run)
        else:
            run, keys = self.free.spelled(row, min(self.max_run, left))
            logits = point_mass_logits(run, self.free.width)
        self.free.begin(start, run, keys, free=len(run))
        if not run:
            return input_ids, None
        return extended(input_ids, run), logits.to(input_ids.device)

    def update_candidate_strategy(
        self, input_ids: torch.LongTensor, scores: torch.Tensor, num_matches: int
    ) -> None:
        self.free.end(input_ids[0].tolist())


def extended(input_ids: torch.LongTensor, tokens: list[int]) -> torch.LongTensor:
    """``input_ids`` (one row) with ``tokens`` appended."""
    if not tokens:
        return input_ids
    extra = torch.tensor([tokens], dtype=input_ids.dtype, device=input_ids.device)
    return torch.cat([input_ids, extra], dim=1)


def common_prefix(new: list[int], draft: list[int]) -> int:
    """Draft tokens the target kept: the common prefix (at the first rejection the target never
    samples the rejected token: Leviathan resamples from max(0, p − q), which is 0 there)."""
    n = 0
    while n < min(len(new), len(draft)) and new[n] == draft[n]:
        n += 1
    return n
