"""Shared fixtures: the real SmolLM2 tokenizer and a SentencePiece-style tokenizer trained here."""

from __future__ import annotations

import os

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n K: the cores shared among K workers
    import torch

    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))

CORPUS = [
    "hello world, the quick brown fox jumps over the lazy dog",
    '{"name": "Ann", "age": 31, "tags": ["a", "b"]}',
    "(()()) ((())) ()()",
    "ac bc ab cab acac",
    "user.name@example.com admin@mail.org",
    "ok error pending yes no",
    "numbers 0123456789 1984 2024",
]


def train_byte_fallback_tokenizer():
    """A Llama/Mistral-style tokenizer: BPE over '▁'-marked text with <0xHH> byte fallback.

    It covers every byte (non-ASCII text falls back to byte tokens) and differs from byte-level
    BPE in how tokens map to bytes, which is what the grammar layer must get right.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=list('abcdefghijklmnopqrstuvwxyz0123456789{}[]()":,.@_%+-▁'),
        show_progress=False,
    )
    base.train_from_iterator(CORPUS * 20, trainer)
    vocab = dict(base.get_vocab())
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    model_json = base.to_str()
    import json

    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
              for m in json.loads(model_json)["model"]["merges"]]  # fmt: skip
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


@pytest.fixture(scope="session")
def smol_tokenizer():
    from hf_fvo.models import load_default_tokenizer

    return load_default_tokenizer()


@pytest.fixture(scope="session")
def sp_tokenizer():
    return train_byte_fallback_tokenizer()


@pytest.fixture(scope="session", params=["smollm2", "sentencepiece"])
def tokenizer(request, smol_tokenizer, sp_tokenizer):
    """Both tokenizer families, for tests that must hold for each."""
    return smol_tokenizer if request.param == "smollm2" else sp_tokenizer
