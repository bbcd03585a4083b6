"""The finite-language token trie enumerates exactly the token sequences of the language."""

from __future__ import annotations

import pytest

from hf_fvo import Grammar
from hf_fvo.errors import EmptyLanguageError, GrammarTooLargeError, InfiniteLanguageError
from hf_fvo.grammar import TokenVocabulary

CHOICES = ["ok", "error", "not found"]


def _segmentations(text: bytes, pieces: dict[bytes, list[int]]) -> int:
    """Number of ways to spell ``text`` as a token sequence (independent DP over positions)."""
    ways = [0] * (len(text) + 1)
    ways[len(text)] = 1
    for i in range(len(text) - 1, -1, -1):
        ways[i] = sum(
            len(ids) * ways[i + len(b)] for b, ids in pieces.items() if text.startswith(b, i)
        )
    return ways[0]


def test_trie_holds_every_tokenization_of_every_member(tokenizer):
    g = Grammar.from_choices(CHOICES, tokenizer)
    trie = g.token_trie()
    vocab = TokenVocabulary.from_tokenizer(tokenizer)
    sequences = trie.sequences()
    assert len(set(sequences)) == len(sequences) == trie.num_sequences
    assert {vocab.decode(s).decode() for s in sequences} == set(CHOICES)
    pieces = vocab.byte_map()
    assert trie.num_sequences == sum(_segmentations(c.encode(), pieces) for c in CHOICES)
    for s in sequences:
        assert s[-1] == g.eos_token_id and g.walk(s) == g.terminal_state


def test_trie_children_are_contiguous_and_consistent(smol_tokenizer):
    g = Grammar.from_choices(CHOICES, smol_tokenizer)
    trie = g.token_trie()
    for node in range(trie.num_nodes):
        kids = trie.children(node).tolist()
        assert all(int(trie.parent[k]) == node for k in kids)
        tokens = [int(trie.token[k]) for k in kids]
        assert tokens == sorted(tokens)
        for k in kids:
            assert g.next_state(int(trie.state[node]), tokens[kids.index(k)]) == int(trie.state[k])
        assert bool(trie.is_eos[node]) == (not kids and node > 0)


def test_length_bound_keeps_only_short_sequences(smol_tokenizer):
    g = Grammar.from_regex(r"(ab)+", smol_tokenizer)
    with pytest.raises(InfiniteLanguageError):
        g.token_trie()
    trie = g.token_trie(max_new_tokens=4)
    assert trie.num_sequences > 0
    assert all(len(s) <= 4 for s in trie.sequences())
    full = {s for s in g.token_trie(max_new_tokens=5).sequences()}
    assert set(trie.sequences()) == {s for s in full if len(s) <= 4}


def test_length_bound_that_empties_the_language_is_an_error(smol_tokenizer):
    g = Grammar.from_choices(["a very long answer indeed"], smol_tokenizer)
    with pytest.raises(EmptyLanguageError, match="max_new_tokens"):
        g.token_trie(max_new_tokens=2)


def test_size_guard_refuses_large_tries(smol_tokenizer):
    g = Grammar.dyck(3, 16, smol_tokenizer)
    with pytest.raises(GrammarTooLargeError, match="nodes"):
        g.token_trie(max_nodes=10_000)
