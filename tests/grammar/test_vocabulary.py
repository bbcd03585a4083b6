"""Token bytes agree with the tokenizer's own decoding; unusable tokenizers fail clearly."""

from __future__ import annotations

import random

import pytest

from hf_fvo.errors import TokenizerError
from hf_fvo.grammar import TokenVocabulary


def test_token_bytes_reproduce_the_tokenizers_decoding(tokenizer):
    vocab = TokenVocabulary.from_tokenizer(tokenizer)
    texts = ['{"name": "Ann", "age": 31}', "naïve café 日本語 😀", "(()())\n\tx", "a@b.com ok"]
    rng = random.Random(0)
    text_ids = [i for i, b in enumerate(vocab.token_bytes) if b and _is_utf8(b)]
    samples = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    samples += [[rng.choice(text_ids) for _ in range(12)] for _ in range(300)]
    checked = 0
    for ids in samples:
        try:  # decoders differ only in how they replace invalid UTF-8, so compare valid text
            got = vocab.decode(ids).decode("utf-8")
        except UnicodeDecodeError:
            continue
        assert got == tokenizer.decode(ids, clean_up_tokenization_spaces=False), ids
        checked += 1
    assert checked >= 100


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_special_and_added_tokens_spell_no_text(tokenizer):
    vocab = TokenVocabulary.from_tokenizer(tokenizer)
    for i in set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder):
        assert vocab.token_bytes[i] is None
    assert vocab.eos_token_ids == (tokenizer.eos_token_id,)


def test_vocabulary_is_cached_per_tokenizer(smol_tokenizer):
    assert TokenVocabulary.from_tokenizer(smol_tokenizer) is TokenVocabulary.from_tokenizer(
        smol_tokenizer
    )


def test_byte_fallback_tokens_map_to_single_bytes(sp_tokenizer):
    vocab = TokenVocabulary.from_tokenizer(sp_tokenizer)
    byte_id = sp_tokenizer.convert_tokens_to_ids("<0x0A>")
    assert vocab.token_bytes[byte_id] == b"\n"
    assert vocab.scheme == "decoder_steps"


def _wordpiece_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece({"[UNK]": 0, "[SEP]": 1, "a": 2, "##b": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[SEP]")


def test_wordpiece_tokenizer_is_refused_with_the_reason():
    with pytest.raises(TokenizerError, match="WordPiece"):
        TokenVocabulary.from_tokenizer(_wordpiece_tokenizer())


def test_tokenizer_without_eos_needs_an_explicit_id(sp_tokenizer):
    from transformers import PreTrainedTokenizerFast

    bare = PreTrainedTokenizerFast(tokenizer_object=sp_tokenizer.backend_tokenizer)
    with pytest.raises(TokenizerError, match="eos_token_id"):
        TokenVocabulary.from_tokenizer(bare)
    assert TokenVocabulary.from_tokenizer(bare, eos_token_id=2).eos_token_ids == (2,)


@pytest.mark.parametrize("bad", [object(), "gpt2", 42])
def test_non_tokenizers_are_refused(bad):
    with pytest.raises(TokenizerError):
        TokenVocabulary.from_tokenizer(bad, eos_token_id=0)


def test_explicit_vocabulary_validates_its_eos():
    with pytest.raises(TokenizerError, match="outside"):
        TokenVocabulary([b"a"], eos_token_ids=[3])
    with pytest.raises(TokenizerError, match="must not spell"):
        TokenVocabulary([b"a", b"b"], eos_token_ids=[1])
