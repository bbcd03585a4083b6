"""One served request's logits processor: (output token ids, logits row) → logits row.

vLLM calls a per-request processor with the request's running list of output tokens and its
row of logits. hf_fvo's :class:`~hf_fvo.generation.FVOLogitsProcessor` already is a pure
function of the tokens (the grammar state is recomputed from them, memoised by prefix), so a
request that vLLM preempts and resumes, moves to another batch slot or recomputes after a
prefix-cache hit gets the same scores; the budget is the request's ``max_tokens``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import torch

from hf_fvo.errors import InvalidArgumentError
from hf_fvo.generation import FVOLogitsProcessor
from hf_fvo.generation.processors import MaskedRow
from hf_fvo.grammar import Grammar
from hf_fvo.phi import PhiEstimator

__all__ = ["RequestProcessor", "end_now", "shareable"]

_log = logging.getLogger("hf_fvo.vllm")


class RequestProcessor:
    """The logits processor of one request: log p_t + log Φ̂_t on the admissible tokens that
    leave room for a completion within ``max_tokens``, −inf elsewhere.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import UniformPhi
        >>> from hf_fvo.vllm.request import RequestProcessor
        >>> from hf_fvo.models import load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> g = Grammar.from_choices(["yes", "no"], tok)
        >>> rows = RequestProcessor(g, UniformPhi(g), max_tokens=8)
        >>> int(rows(tok.encode("ye"), torch.zeros(g.vocab_size)).isfinite().sum())  # "s"
        1
    """

    def __init__(
        self,
        grammar: Grammar,
        phi: PhiEstimator,
        max_tokens: int | None,
        processor: FVOLogitsProcessor | None = None,
    ) -> None:
        """``processor``: the processor of another request with the same grammar, Φ̂ and
        budget, to share (a pure function of the tokens, memoised by prefix: requests that
        agree on a prefix then share its grammar state and budget check); default a new one."""
        if processor is None:
            processor = FVOLogitsProcessor(grammar, phi, prompt_length=0,
                                           max_new_tokens=max_tokens)  # fmt: skip
            processor.tracker.input_length = 0  # the budget counts every output token
        elif not shareable(processor, grammar, phi, max_tokens):
            raise InvalidArgumentError(
                "a shared processor must have the request's own grammar, Φ̂ and max_tokens"
            )
        else:
            processor.tracker.expect_rows(processor.tracker.rows + 1)
        self.processor = processor
        self._end = end_now(grammar.eos_token_ids)
        self._failed = False

    def row(self, output_ids: Sequence[int], index: int = 0) -> MaskedRow | None:
        """This request as row ``index`` of a batched masking step (see
        :func:`~hf_fvo.generation.processors.mask_batch`), with its grammar state read from
        its output tokens; ``None`` where the request takes the per-row path instead: Φ̂ other
        than masking, a request that failed, tokens the grammar does not know (the per-row
        path logs them) or a placeholder for a token not sampled yet (vLLM's asynchronous
        scheduling writes −1 until then).

        Example:
            >>> from hf_fvo import Grammar
            >>> from hf_fvo.phi import UniformPhi
            >>> from hf_fvo.vllm.request import RequestProcessor
            >>> from hf_fvo.models import load_default_tokenizer
            >>> tok = load_default_tokenizer()
            >>> g = Grammar.from_choices(["yes", "no"], tok)
            >>> RequestProcessor(g, UniformPhi(g), max_tokens=8).row(tok.encode("ye")).remaining
            7
        """
        if self._failed or not self.processor.estimator.is_masking:
            return None
        generated = tuple(output_ids)
        if generated and generated[-1] < 0:
            return None
        tracker = self.processor.tracker
        try:
            state = tracker.state(generated)
        except Exception:
            return None
        return MaskedRow(index, state, tracker.remaining(len(generated)), (), generated)

    def __call__(self, output_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if self._failed:
            return self._end((), logits)
        try:
            ids = torch.tensor([list(output_ids)], dtype=torch.long).reshape(1, -1)
            return self.processor(ids, logits.unsqueeze(0))[0]
        except Exception:
            # Inside vLLM's engine an exception would stop the server and every request. The
            # front end admitted this request (same grammar, same budget), so this is a bug or
            # another component's tokens: log it and end this request here.
            _log.exception("hf_fvo: the request's processor failed; its output ends here")
            self._failed = True
            return self._end((), logits)


def shareable(
    processor: FVOLogitsProcessor, grammar: Grammar, phi: PhiEstimator, max_tokens: int | None
) -> bool:
    """Whether a request with this grammar, Φ̂ and budget may share ``processor``.

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import UniformPhi
        >>> from hf_fvo.vllm.request import RequestProcessor, shareable
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_choices(["yes", "no"], load_default_tokenizer())
        >>> phi = UniformPhi(g)
        >>> p = RequestProcessor(g, phi, max_tokens=8).processor
        >>> shareable(p, g, phi, 8), shareable(p, g, phi, 9)
        (True, False)
    """
    return (processor.grammar is grammar and processor.estimator is phi
            and processor.tracker.max_new_tokens == max_tokens)  # fmt: skip


def end_now(eos_token_ids: Sequence[int]) -> Callable[[Sequence[int], torch.Tensor], torch.Tensor]:
    """A processor that ends its request at once (EOS only): what the engine falls back to
    where building or running a request's processor failed after admission — logged, since an
    exception inside vLLM's engine would stop every request.

    Example:
        >>> import torch
        >>> from hf_fvo.vllm.request import end_now
        >>> end_now([2])([], torch.zeros(4)).tolist()
        [-inf, -inf, 0.0, -inf]
    """
    eos = list(eos_token_ids)

    def end(output_ids: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        out = torch.full_like(logits, -torch.inf)
        out[eos] = 0.0
        return out

    return end
