"""The grammar compiler owns the tokenizer's facts and every cache: one compile per grammar."""

from __future__ import annotations

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import TokenizerError
from hf_fvo.grammar import GrammarCompiler, clear_cache
from hf_fvo.grammar.vocabulary import BRACKETS

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def test_front_doors_share_the_tokenizers_compiler(smol_tokenizer):
    shared = GrammarCompiler.shared(smol_tokenizer)
    g = Grammar.from_json_schema(SCHEMA, smol_tokenizer, whitespace="")
    assert shared.json_schema(SCHEMA, whitespace="") is g
    assert Grammar.from_choices(["a", "b"], smol_tokenizer) is shared.choices(["a", "b"])


def test_a_schema_given_again_is_not_lowered_again_but_its_key_order_is_its_meaning(
    smol_tokenizer, monkeypatch
):
    """A server compiles the same schema per request: the second compile must come from the
    cache without lowering it again; the same properties in another order are another
    language (key_order='schema'), so another grammar."""
    import hf_fvo.grammar.compiler as compiler_module

    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["a", "b"]}  # fmt: skip
    g = Grammar.from_json_schema(schema, smol_tokenizer)

    def lowered(*args, **kwargs):
        raise AssertionError("the schema was lowered again")

    monkeypatch.setattr(compiler_module, "closing_bound", lowered)
    assert Grammar.from_json_schema(dict(schema), smol_tokenizer) is g
    monkeypatch.undo()
    swapped = {**schema, "properties": dict(reversed(schema["properties"].items()))}
    other = Grammar.from_json_schema(swapped, smol_tokenizer)
    text = smol_tokenizer.encode('{"a": 1, "b": "x"}')
    assert other is not g and g.walk(text) is not None and other.walk(text) is None


def test_another_mask_length_is_another_compiler(smol_tokenizer):
    a = GrammarCompiler.shared(smol_tokenizer)
    b = GrammarCompiler.shared(smol_tokenizer, len(smol_tokenizer) + 64)
    assert a is not b and b.vocab_size == len(smol_tokenizer) + 64
    assert b.choices(["a"]).vocab_size == len(smol_tokenizer) + 64


def test_clear_cache_forgets_compiled_grammars(smol_tokenizer):
    g = Grammar.from_choices(["x", "y"], smol_tokenizer)
    clear_cache()
    again = Grammar.from_choices(["x", "y"], smol_tokenizer)
    assert again is not g and again.token_trie().num_sequences == g.token_trie().num_sequences


def test_a_private_compiler_keeps_its_own_grammars():
    compiler = GrammarCompiler(BRACKETS, cache_size=1)
    a = compiler.dyck(2, 6)
    assert compiler.dyck(2, 6) is a
    compiler.dyck(3, 6)  # evicts the first (cache_size=1)
    assert compiler.dyck(2, 6) is not a


def test_a_mask_shorter_than_the_vocabulary_is_refused(smol_tokenizer):
    with pytest.raises(TokenizerError, match="would cut off usable tokens"):
        GrammarCompiler(smol_tokenizer, vocab_size=100)


@pytest.mark.parametrize("not_a_tokenizer", [None, "gpt2"])
def test_a_compiler_needs_a_tokenizer_and_says_so(not_a_tokenizer):
    with pytest.raises(TokenizerError, match="pass a Hugging Face tokenizer"):
        GrammarCompiler(not_a_tokenizer)
    with pytest.raises(TokenizerError, match="pass a Hugging Face tokenizer"):
        Grammar.from_choices(["a"], not_a_tokenizer)
