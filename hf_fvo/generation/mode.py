"""How ``hf_fvo.generate`` runs a call: the one decision, as a pure function of the request.

- ``"row_by_row"``: speculation asked for a batch or several samples per prompt; Transformers'
  assisted decoding is batch-1, so each row runs alone;
- ``"assisted"``: Transformers' assisted decoding, with a draft model (FVO-Spec) or with the
  grammar as the only draft (free runs of spelled-out text, exact Φ's tables);
- ``"plain"``: Transformers' own loop for the mode (sampling, greedy, beam search).

Without a draft model and without ``grammar_draft``, grammar-only speculation is the default
where assisted decoding serves the call as plain decoding would (one sequence, no per-step
outputs, a model and cache it can roll back); elsewhere the call is plain.
"""

from __future__ import annotations

from dataclasses import dataclass

from hf_fvo.errors import InvalidArgumentError

__all__ = ["DecodingRequest", "decoding_mode"]


@dataclass(frozen=True)
class DecodingRequest:
    """What the decision reads.

    Args:
        draft_model: An ``assistant_model`` was given.
        grammar_draft: The user's ``grammar_draft`` flag (``None``: the default).
        rows: Prompts in the batch.
        copies: ``num_return_sequences``.
        per_step: Per-step outputs asked for (``output_scores``, a streamer…), by name.
        beams: ``num_beams``.
        encoder_decoder: The model is an encoder-decoder.
        why_not_assisted: Why Transformers' assisted decoding cannot run with this model and
            cache (``use_cache=False``, a static cache; a stateful model on Transformers ≤ 5.24), or
            ``None``.
    """

    draft_model: bool = False
    grammar_draft: bool | None = None
    rows: int = 1
    copies: int = 1
    per_step: tuple[str, ...] = ()
    beams: int = 1
    encoder_decoder: bool = False
    why_not_assisted: str | None = None


def decoding_mode(request: DecodingRequest) -> str:
    """``"row_by_row"``, ``"assisted"`` or ``"plain"`` for ``request``.

    Raises:
        InvalidArgumentError: speculation was asked for (a draft model, ``grammar_draft=True``)
            where assisted decoding cannot run.

    Example:
        >>> from hf_fvo.generation.mode import DecodingRequest, decoding_mode
        >>> decoding_mode(DecodingRequest())  # one prompt: the grammar drafts for free
        'assisted'
        >>> decoding_mode(DecodingRequest(rows=4)), decoding_mode(DecodingRequest(beams=3))
        ('plain', 'plain')
        >>> decoding_mode(DecodingRequest(draft_model=True, rows=4))
        'row_by_row'
    """
    r = request
    asked = r.draft_model or r.grammar_draft is True
    if asked and (r.rows > 1 or r.copies > 1):
        return "row_by_row"
    by_default = (
        r.grammar_draft is None and not r.draft_model and r.rows == 1 and r.copies == 1
        and not r.per_step and not r.encoder_decoder
    )  # fmt: skip
    if not asked and not by_default:
        return "plain"
    if not r.draft_model and (r.beams > 1 or (by_default and r.why_not_assisted)):
        return "plain"
    if r.why_not_assisted:
        raise InvalidArgumentError(
            f"speculative decoding (assistant_model, grammar_draft=True) cannot run with "
            f"{r.why_not_assisted}: Transformers' assisted decoding rolls the cache back"
        )
    return "assisted"
