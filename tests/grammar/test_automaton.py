"""Structure of the compiled automaton: CSR transitions, EOS/terminal semantics, distances,
masks over the model vocabulary, cache, pickling and memory."""

from __future__ import annotations

import pickle
from collections import deque

import pytest
import torch

from hf_fvo import Grammar, GrammarError
from hf_fvo.grammar import TokenVocabulary, clear_cache
from tests.grammar.bruteforce import bfs_states
from tests.grammar.cases import CASE_IDS, CASES, NESTED_SCHEMA


@pytest.fixture(scope="module", params=CASES, ids=CASE_IDS)
def grammar(request, smol_tokenizer):
    return request.param.build(smol_tokenizer)


def test_grouped_transitions_agree_with_next_state_and_allowed(grammar):
    for state in range(grammar.num_states):
        groups = grammar.transitions(state)
        offsets = groups.offsets.tolist()
        assert offsets[0] == 0 and offsets == sorted(offsets)
        assert len(set(groups.next_states.tolist())) == len(groups.next_states)
        mask = grammar.allowed(state)
        assert int(mask.sum()) == len(groups.token_ids) + (
            len(grammar.eos_token_ids) if grammar.is_accepting(state) else 0
        )
        for k, nxt in enumerate(groups.next_states.tolist()):
            tokens = groups.token_ids[offsets[k] : offsets[k + 1]].tolist()
            assert tokens == sorted(tokens)
            for t in tokens[:50]:
                assert mask[t] and grammar.next_state(state, t) == nxt
        banned = torch.nonzero(~mask).flatten()[:50].tolist()
        assert all(grammar.next_state(state, t) is None for t in banned)


def test_every_state_can_still_accept(grammar):
    # Dead states are trimmed: a non-accepting state has a successor one step closer.
    for state in range(grammar.num_states):
        d = grammar.min_tokens_to_accept(state)
        assert (d == 0) == grammar.is_accepting(state)
        if d > 0:
            nxt = grammar.transitions(state).next_states.tolist()
            assert any(grammar.min_tokens_to_accept(n) == d - 1 for n in nxt)


def test_min_tokens_to_accept_matches_a_token_level_bfs(grammar):
    # BFS over (state, token) pairs from each sampled state, independent of the stored table.
    for start in list(range(grammar.num_states))[:10]:
        seen, frontier, found = {start}, deque([(start, 0)]), None
        while frontier:
            s, d = frontier.popleft()
            if grammar.is_accepting(s):
                found = d
                break
            for t in grammar.allowed_token_ids(s).tolist():
                n = grammar.next_state(s, t)
                if n not in seen:
                    seen.add(n)
                    frontier.append((n, d + 1))
        assert found == grammar.min_tokens_to_accept(start)
        assert grammar.can_accept_within(start, found)
        assert found == 0 or not grammar.can_accept_within(start, found - 1)


def test_eos_leads_to_an_absorbing_terminal_state(grammar):
    eos, terminal = grammar.eos_token_id, grammar.terminal_state
    assert grammar.is_accepting(terminal)
    assert torch.equal(torch.nonzero(grammar.allowed(terminal)).flatten(), torch.tensor([eos]))
    assert grammar.next_state(terminal, eos) == terminal
    for state in range(grammar.num_states - 1):
        expected = terminal if grammar.is_accepting(state) else None
        assert grammar.next_state(state, eos) == expected


def test_masks_cover_a_model_vocabulary_larger_than_the_tokenizer(smol_tokenizer):
    padded = len(smol_tokenizer) + 64
    g = Grammar.from_regex(r"[a-z]+", smol_tokenizer, vocab_size=padded)
    small = Grammar.from_regex(r"[a-z]+", smol_tokenizer)
    mask = g.allowed(g.initial_state)
    assert mask.shape == (padded,) and not mask[len(smol_tokenizer) :].any()
    assert torch.equal(mask[: len(smol_tokenizer)], small.allowed(small.initial_state))
    assert g.nbytes == small.nbytes  # nothing scales with the vocabulary


def test_vocab_size_that_cuts_usable_tokens_is_refused(smol_tokenizer):
    with pytest.raises(GrammarError, match="vocab_size"):
        Grammar.from_regex(r"[a-z]+", smol_tokenizer, vocab_size=1000)


def test_second_compile_is_served_from_the_cache(smol_tokenizer):
    clear_cache()
    first = Grammar.from_json_schema(NESTED_SCHEMA, smol_tokenizer)
    assert Grammar.from_json_schema(NESTED_SCHEMA, smol_tokenizer) is first
    assert Grammar.from_json_schema(NESTED_SCHEMA, smol_tokenizer, whitespace="") is not first


def test_pickled_automaton_behaves_identically(grammar):
    clone = pickle.loads(pickle.dumps(grammar))
    assert clone.num_states == grammar.num_states and clone.source == grammar.source
    for state in range(grammar.num_states):
        assert torch.equal(clone.allowed(state), grammar.allowed(state))
        for t in grammar.allowed_token_ids(state)[:5].tolist():
            assert clone.next_state(state, t) == grammar.next_state(state, t)


def test_memory_is_linear_in_transitions_not_states_times_vocab(grammar):
    # Stored per transition: token (grouped copy), token and destination (sorted copy).
    per_state = 8 * 4 + 1  # pointers, distance and accepting flag
    per_group = 8 * 2
    groups = sum(len(grammar.transitions(s).next_states) for s in range(grammar.num_states))
    bound = (
        12 * grammar.num_transitions
        + per_state * (grammar.num_states + 1)
        + per_group * (groups + 1)
    )
    assert grammar.nbytes <= bound


def test_reserved_character_can_never_be_spelled(smol_tokenizer):
    g = Grammar.from_regex(r"(ac|[^a])+", smol_tokenizer)
    vocab = TokenVocabulary.from_tokenizer(smol_tokenizer)
    byte_token = {b[0]: i for i, b in enumerate(vocab.token_bytes) if b and len(b) == 1}
    spelled = [byte_token[b"!"[0]]] + [byte_token[x] for x in g.reserved_character.encode()]
    assert g.walk(spelled[:-1]) is not None  # a partial noncharacter is still a valid prefix
    assert g.walk(spelled) is None
    other = [byte_token[b"!"[0]]] + [byte_token[x] for x in "\ue000".encode()]
    assert g.is_accepting(g.walk(other))  # other private-use text is fine


def test_bfs_reaches_beyond_the_initial_state(grammar, smol_tokenizer):
    vocab = TokenVocabulary.from_tokenizer(smol_tokenizer)
    assert len(bfs_states(grammar, vocab.token_bytes, 2)) > 1


def test_unknown_state_is_a_typed_error(grammar):
    with pytest.raises(GrammarError, match="not a state"):
        grammar.allowed(grammar.num_states)
