"""Admissible sets as packed bitmasks: 32 token ids a word (id t is bit ``t & 31`` of word
``t >> 5``), int32 — the layout XGrammar and llguidance fill and vLLM applies — so a batch's
sets travel as one small array (vocab/32 words a row) and mask the logits in one operation on
their device (:meth:`Grammar.admissible_words <hf_fvo.grammar.Grammar.admissible_words>` fills
them)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

__all__ = ["apply_bitmask", "apply_bitmask_with_peaks", "bias_table", "pack", "unpack"]

# the bit patterns of −inf per float dtype, as unsigned integers of the same width (0.0 is 0)
NEG_INF_BITS: dict[torch.dtype, tuple[type, Any]] = {
    torch.float32: (np.uint32, np.uint32(0xFF800000)),
    torch.bfloat16: (np.uint16, np.uint16(0xFF80)),
    torch.float16: (np.uint16, np.uint16(0xFC00)),
}

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


def apply_bitmask(
    scores: torch.Tensor, words: np.ndarray | torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """``scores`` (rows × vocabulary) with −inf wherever a row's bit is 0 (ids past the words'
    width too), written to ``out`` (default: in place) and returned.

    On a CPU (float32, bfloat16, float16) each byte of the words picks 8 ready-made biases
    (0.0 or −inf's bits) from a table and one add masks the batch: no float arithmetic builds
    the mask. Elsewhere the words move to the scores' device once, as vocab/32 int32 a row,
    and are unpacked and applied there. Either way a NaN or +inf score on a cleared bit
    becomes −inf like any other.

    Example:
        >>> import numpy as np, torch
        >>> from hf_fvo.grammar.bitmask import apply_bitmask, pack
        >>> scores = torch.zeros(2, 3)
        >>> words = np.stack([pack(np.array([1, 0, 1])), pack(np.array([0, 1, 0]))])
        >>> apply_bitmask(scores, words).tolist()
        [[0.0, -inf, 0.0], [-inf, 0.0, -inf]]
    """
    return apply_bitmask_with_peaks(scores, words, out)[0]


def apply_bitmask_with_peaks(
    scores: torch.Tensor, words: np.ndarray | torch.Tensor, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`apply_bitmask`, and each masked row's largest score (NaN where an admissible
    score is NaN): what a processor checks before sampling, from the same pass.

    Example:
        >>> import numpy as np, torch
        >>> from hf_fvo.grammar.bitmask import apply_bitmask_with_peaks, pack
        >>> scores = torch.tensor([[3.0, 1.0, 2.0], [float("nan"), 5.0, 0.0]])
        >>> words = np.stack([pack(np.array([0, 1, 1])), pack(np.array([1, 0, 1]))])
        >>> apply_bitmask_with_peaks(scores, words)[1].tolist()
        [2.0, nan]
    """
    out = scores if out is None else out
    vocab = scores.shape[-1]
    if scores.device.type == "cpu" and scores.dtype in NEG_INF_BITS:
        return _apply_on_cpu(scores, np.asarray(words), out)
    words = torch.as_tensor(words).to(scores.device, non_blocking=True)
    kept = unpack(words, min(vocab, words.shape[-1] * 32))
    if out is not scores:
        out.copy_(scores)
    if kept.shape[-1] < vocab:
        out[..., kept.shape[-1] :] = -torch.inf
    out[..., : kept.shape[-1]].masked_fill_(~kept, -torch.inf)
    return out, out.amax(dim=-1)


def _apply_on_cpu(
    scores: torch.Tensor, words: np.ndarray, out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    uint, neg_inf = NEG_INF_BITS[scores.dtype]
    vocab = scores.shape[-1]
    bias = np.take(bias_table(uint, neg_inf), words.view(np.uint8), axis=0)
    bias = bias.reshape(*words.shape[:-1], -1)  # 32 biases a word
    if bias.shape[-1] < vocab:  # ids past the words: never admissible
        pad = np.full((*bias.shape[:-1], vocab - bias.shape[-1]), neg_inf, dtype=uint)
        bias = np.concatenate([bias, pad], axis=-1)
    bias_t = torch.from_numpy(bias[..., :vocab]).view(scores.dtype)
    if scores.dtype == torch.bfloat16:  # numpy has no bfloat16
        torch.add(scores, bias_t, out=out)
        out.masked_fill_(bias_t.isinf(), -torch.inf)  # NaN or +inf scores where the bit is 0
        return out, out.amax(dim=-1)
    with np.errstate(invalid="ignore"):  # +inf − inf and NaN − inf are NaN: fixed below
        np.add(scores.detach().numpy(), bias_t.numpy(), out=out.numpy())
    # a tenth of torch's single-threaded reduction over 50k floats
    peaks = np.asarray(out.numpy().max(axis=-1))
    if np.isnan(peaks).any():
        out.masked_fill_(bias_t.isinf(), -torch.inf)
        peaks = np.asarray(out.numpy().max(axis=-1))
    return out, torch.from_numpy(peaks)


@functools.cache
def bias_table(uint: type, neg_inf: Any) -> np.ndarray:
    """``table[b, i]``: bit i of byte b as a bias, 0 where set and −inf's bits (``neg_inf``,
    of the unsigned type ``uint``) where clear.

    Example:
        >>> import numpy as np
        >>> from hf_fvo.grammar.bitmask import bias_table
        >>> bias_table(np.uint16, np.uint16(0xFC00))[5].tolist()  # byte 0b101
        [0, 64512, 0, 64512, 64512, 64512, 64512, 64512]
    """
    byte, bit = np.arange(256)[:, None], np.arange(8)[None, :]
    return np.where((byte >> bit) & 1, uint(0), neg_inf).astype(uint)
