"""Admissible sets as packed bitmasks: 32 token ids a word (id t is bit ``t & 31`` of word
``t >> 5``), int32 — the layout XGrammar and llguidance fill and vLLM applies — so a batch's
sets travel as one small array (vocab/32 words a row) and mask the logits in one operation on
their device (:meth:`Grammar.admissible_words <hf_fvo.grammar.Grammar.admissible_words>` fills
them)."""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["apply_bitmask", "pack", "unpack"]

_SHIFTS: dict[torch.device, torch.Tensor] = {}


def pack(mask: np.ndarray) -> np.ndarray:
    """A 0/1 (or bool) vector of ids, packed into int32 words.

    Example:
        >>> import numpy as np
        >>> from hf_fvo.grammar.bitmask import pack
        >>> pack(np.array([1, 0, 1] + [0] * 30, dtype=bool)).tolist()  # ids 0 and 2
        [5, 0]
    """
    bits = np.asarray(mask, dtype=bool)
    width = (len(bits) + 31) // 32
    out = np.zeros(width * 4, dtype=np.uint8)
    packed = np.packbits(bits, bitorder="little")
    out[: len(packed)] = packed
    return out.view(np.int32)


def unpack(words: np.ndarray | torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Packed words (…, vocab/32) back to a bool tensor (…, ``vocab_size``) on their device.

    Example:
        >>> import numpy as np
        >>> from hf_fvo.grammar.bitmask import pack, unpack
        >>> unpack(pack(np.array([True, False, True])), 3).tolist()
        [True, False, True]
    """
    words = torch.as_tensor(words)
    shifts = _SHIFTS.get(words.device)
    if shifts is None:
        shifts = _SHIFTS[words.device] = torch.arange(32, dtype=torch.int32, device=words.device)
    bits = (words.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(-2)[..., :vocab_size].bool()


def apply_bitmask(scores: torch.Tensor, words: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Set ``scores`` (rows × vocabulary) to −inf, in place, wherever a row's bit is 0 (ids
    past the words' width too); the words move to the scores' device once, as vocab/32 int32
    a row.

    Example:
        >>> import numpy as np, torch
        >>> from hf_fvo.grammar.bitmask import apply_bitmask, pack
        >>> scores = torch.zeros(2, 3)
        >>> words = np.stack([pack(np.array([1, 0, 1])), pack(np.array([0, 1, 0]))])
        >>> apply_bitmask(scores, words).tolist()
        [[0.0, -inf, 0.0], [-inf, 0.0, -inf]]
    """
    words = torch.as_tensor(words).to(scores.device, non_blocking=True)
    vocab = scores.shape[-1]
    kept = unpack(words, min(vocab, words.shape[-1] * 32))
    if kept.shape[-1] < vocab:
        scores[..., kept.shape[-1] :] = -torch.inf
    scores[..., : kept.shape[-1]].masked_fill_(~kept, -torch.inf)
    return scores
