"""The pushdown backend (llguidance) admits exactly the language, token by token.

Its admissible sets are compared with the token automaton's (which the brute-force oracle checks
in test_allowed_sets.py) at every state of a breadth-first walk, for regexes and for regular JSON
schemas lowered by both backends; and with hand-checked context-free languages.
"""

from __future__ import annotations

from collections import deque

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_fvo import Grammar
from hf_fvo.errors import GrammarError, InvalidArgumentError, InvalidGrammarError
from hf_fvo.grammar import GrammarMatcher, PushdownGrammar, TokenVocabulary
from tests.grammar.cases import AC_BUG, CHOICES, EMAIL, NESTED_SCHEMA

BFS_STATES = 120

REGULAR_SCHEMAS = {
    "nested": NESTED_SCHEMA,
    "enum_control_chars": {
        "type": "object",
        "properties": {
            "a": {"type": "integer"},
            "b": {"enum": ["x", "y\n", 1.5, None]},
            "c": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        },
        "required": ["b"],
    },
    "lengths": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 4},
            "n": {"type": "number"},
        },
        "required": ["name", "n"],
    },
    "tuple": {
        "anyOf": [
            {"type": "null"},
            {
                "type": "array",
                "prefixItems": [{"const": "k"}, {"type": "integer"}],
                "items": False,
                "minItems": 1,
            },
        ]
    },
}


def paired_walk(a: Grammar, b: Grammar, limit: int):
    """States of ``a`` in breadth-first order (one token per distinct next state) with the state
    of ``b`` after the same tokens."""
    queue = deque([(a.initial_state, b.initial_state, ())])
    seen = {a.initial_state}
    while queue and len(seen) <= limit:
        sa, sb, tokens = queue.popleft()
        yield sa, sb, tokens
        groups = a.transitions(sa)
        for k, nxt in enumerate(groups.next_states.tolist()):
            if nxt not in seen:
                seen.add(nxt)
                token = int(groups.token_ids[int(groups.offsets[k])])
                queue.append((nxt, b.next_state(sb, token), (*tokens, token)))


def assert_same_sets(automaton: Grammar, pushdown: Grammar, tokenizer) -> None:
    """Equal admissible sets along the walk, up to texts holding the automaton's reserved
    noncharacter (its compiler's sentinel, which only the automaton excludes)."""
    vocab = TokenVocabulary.from_tokenizer(tokenizer)
    sigma = automaton.reserved_character.encode()
    for sa, sp, tokens in paired_walk(automaton, pushdown, BFS_STATES):
        assert sp is not None, f"pushdown refused {tokenizer.decode(list(tokens))!r}"
        ma, mp = automaton.allowed(sa), pushdown.allowed(sp)
        prefix = vocab.decode(tokens)
        for t in (mp & ~ma).nonzero().flatten().tolist():
            if sigma in prefix[-len(sigma) :] + (vocab.token_bytes[t] or b""):
                mp[t] = False
        if not torch.equal(ma, mp):
            extra = (mp & ~ma).nonzero().flatten().tolist()[:5]
            missing = (ma & ~mp).nonzero().flatten().tolist()[:5]
            raise AssertionError(
                f"after {tokenizer.decode(list(tokens))!r}: pushdown adds "
                f"{tokenizer.convert_ids_to_tokens(extra)}, lacks "
                f"{tokenizer.convert_ids_to_tokens(missing)}"
            )
        assert automaton.is_accepting(sa) == pushdown.is_accepting(sp)


@pytest.mark.parametrize(
    "pattern", [EMAIL, AC_BUG, r"\(\(\)\)|\(\)", "(?:" + "|".join(CHOICES) + ")"]
)
def test_pushdown_regex_equals_the_exact_automaton(tokenizer, pattern):
    automaton = Grammar.from_regex(pattern, tokenizer)
    pushdown = Grammar.from_regex(pattern, tokenizer, backend="pushdown")
    assert isinstance(pushdown, PushdownGrammar)
    assert_same_sets(automaton, pushdown, tokenizer)


@pytest.mark.parametrize("whitespace", ["", None])
@pytest.mark.parametrize("name", REGULAR_SCHEMAS)
def test_both_backends_build_the_same_json_language(smol_tokenizer, name, whitespace):
    schema = REGULAR_SCHEMAS[name]
    automaton = Grammar.from_json_schema(schema, smol_tokenizer, whitespace, backend="automaton")
    pushdown = Grammar.from_json_schema(schema, smol_tokenizer, whitespace)
    assert automaton.backend == "automaton" and pushdown.backend == "pushdown"
    assert_same_sets(automaton, pushdown, smol_tokenizer)


def test_forced_text_admits_every_tokenization(smol_tokenizer):
    # llguidance alone allows only the canonical "))" after "((" here; every split is a member
    g = Grammar.from_regex(r"\(\(\)\)|\(\)", smol_tokenizer, backend="pushdown")
    state = g.walk(smol_tokenizer.encode("(("))
    close = smol_tokenizer.convert_tokens_to_ids(")")
    assert g.next_state(state, close) is not None


def test_overlong_utf8_is_never_admitted(smol_tokenizer):
    vocab = TokenVocabulary.from_tokenizer(smol_tokenizer)
    lead = vocab.token_bytes.index(b"\xe0")
    g = Grammar.from_regex("(ac|[^a])+", smol_tokenizer, backend="pushdown")
    state = g.next_state(g.initial_state, lead)
    mask = g.allowed(state)
    after = [vocab.token_bytes[t] for t in mask.nonzero().flatten().tolist()]
    assert after and all(0xA0 <= b[0] <= 0xBF for b in after)  # E0 80..9F would be overlong


def test_context_free_grammars_in_lark_and_ebnf(smol_tokenizer):
    tok = smol_tokenizer
    for g in (
        Grammar.from_lark('start: "a" start "b" | "c"', tok),
        Grammar.from_ebnf('root ::= "a" root "b" | "c"', tok),
    ):
        for text, member in [("aacbb", True), ("c", True), ("aacb", False), ("acbb", False)]:
            state = g.walk(tok.encode(text))
            assert (state is not None and g.is_accepting(state)) == member, (g, text)
        assert g.min_tokens_to_accept(g.initial_state) == 1
        assert not g.is_accepting(g.walk(tok.encode("aa")))


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda tok: Grammar.from_lark("start: (", tok), InvalidGrammarError),
        (lambda tok: Grammar.from_lark(42, tok), InvalidGrammarError),
        (lambda tok: Grammar.from_ebnf('root ::= "a', tok), InvalidGrammarError),
        (lambda tok: Grammar.from_regex("[z-a]", tok, backend="pushdown"), GrammarError),
        (lambda tok: Grammar.from_regex("a", tok, backend="stack"), GrammarError),
    ],
)
def test_malformed_grammars_raise_typed_errors(smol_tokenizer, build, error):
    with pytest.raises(error):
        build(smol_tokenizer)


def test_states_are_immutable_values_and_matchers_roll_back(smol_tokenizer):
    tok = smol_tokenizer
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}, tok,
                                 whitespace="")  # fmt: skip
    start = g.walk(tok.encode("[1"))
    before = g.allowed(start).clone()
    g.walk(tok.encode(",2]"), state=start)
    assert torch.equal(g.allowed(start), before)  # walking on never changes a state
    m = GrammarMatcher(g)
    assert [m.consume(t) for t in tok.encode("[1,")] == [True] * len(tok.encode("[1,"))
    m.rollback(1)
    assert m.consume(tok.convert_tokens_to_ids("]")) and m.is_accepting()
    with pytest.raises(GrammarError, match="not a state"):
        g.allowed(Grammar.from_regex("a", tok, backend="pushdown").initial_state)


def test_eos_only_at_acceptance_and_after_eos(smol_tokenizer):
    tok = smol_tokenizer
    g = Grammar.from_json_schema({"type": "integer"}, tok)
    eos = g.eos_token_id
    assert not g.allowed(g.initial_state)[eos]
    done = g.walk(tok.encode("12"))
    assert g.allowed(done)[eos] and g.next_state(done, eos) is g.terminal_state
    assert g.allowed(g.terminal_state).nonzero().flatten().tolist() == [eos]
    assert g.admissible(g.walk(tok.encode("1")), 1).nonzero().flatten().tolist() == [eos]
    special = [i for i in range(17) if i != eos]
    assert not g.allowed(g.walk(tok.encode("1")))[special].any()


def test_pushdown_grammar_pickles(smol_tokenizer):
    import pickle

    g = Grammar.from_lark('start: "x"+', smol_tokenizer)
    h = pickle.loads(pickle.dumps(g))
    assert h.is_accepting(h.walk(smol_tokenizer.encode("xxx")))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_admissible_bias_is_the_admissible_set_as_zero_and_minus_inf(smol_tokenizer, dtype):
    # the pushdown backend builds it from the parser's packed words, the automaton from its mask;
    # both must be A_t exactly, at every budget, over an id range wider than the tokenizer's
    schema = REGULAR_SCHEMAS["enum_control_chars"]
    width = len(smol_tokenizer) + 40
    for backend in ("pushdown", "automaton"):
        g = Grammar.from_json_schema(schema, smol_tokenizer, "", vocab_size=width, backend=backend)
        state = g.initial_state
        for token in [*smol_tokenizer.encode('{"a":-7,"b":"y\\n","c":[true]}'), g.eos_token_id]:
            for remaining in (None, 3, 1, 0):
                mask = g.admissible(state, remaining)
                bias = g.admissible_bias(state, remaining, dtype)
                assert bias.dtype == dtype and bias.shape == mask.shape
                assert torch.equal(bias == 0, mask), (backend, remaining)
                assert bool(torch.isneginf(bias[~mask]).all()), (backend, remaining)
            state = g.next_state(state, token)
        assert state == g.terminal_state
        bias = g.admissible_bias(state, None, dtype)
        assert torch.equal(bias == 0, g.allowed(state))  # only EOS after EOS
    with pytest.raises(InvalidArgumentError, match="float64"):
        g.admissible_bias(g.initial_state, None, torch.float64)


def test_a_pushdown_regex_refuses_automaton_only_options(smol_tokenizer):
    # max_length bounds the text on the automaton; the pushdown backend cannot honour it, so it
    # is refused, not ignored (it was ignored before issue 31's compiler)
    from hf_fvo.errors import InvalidArgumentError

    for option in ({"max_length": 4}, {"max_states": 10}):
        with pytest.raises(InvalidArgumentError, match="apply to backend='automaton'"):
            Grammar.from_regex("[a-z]+", smol_tokenizer, backend="pushdown", **option)


_PIECES = ["a", "é", '"', "\\", "\\u", "\\ud", "\\uD8", "\\udc", "u", "d", "8", "c", "F", "0",
           "00", "n", "/", "x", "\n"]  # fmt: skip
_STRING_TEXT = st.lists(
    st.sampled_from(_PIECES),
    min_size=1,
    max_size=10,
).map("".join)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(_STRING_TEXT)
def test_the_string_content_automaton_reads_the_string_lexemes_characters(text):
    """The automaton behind the string certificate (``utf8.string_content``) agrees with
    the string lexemes' character regex (``schema.lark.CHAR_REGEX``, the lexeme's own
    definition): where it ends on a boundary the text is whole characters and it counts them;
    where it ends inside a character or an escape, its fill finishes it (one more character
    at most); where it rejects, no continuation makes the text characters."""
    import re

    from hf_fvo.grammar.pushdown.utf8 import string_content
    from hf_fvo.grammar.schema.lark import CHAR_REGEX

    whole = re.compile(f"(?:{CHAR_REGEX})*")
    spelled = text.encode()
    after, chars, fills = string_content(TokenVocabulary([spelled, None], [1]))
    state, count = int(after[0]), int(chars[0])
    if state == 0:
        assert whole.fullmatch(text) and count == len(re.findall(CHAR_REGEX, text))
    elif state >= 8:  # inside an escape: the fill finishes it
        done = text + fills[state].decode()
        assert whole.fullmatch(done) and count == len(re.findall(CHAR_REGEX, done))
    elif state > 0:  # inside a UTF-8 character: not reachable from whole code points
        pytest.fail("a str's bytes end on a character boundary")
    else:  # rejected: a quote, a control, a bad escape — every continuation fails too
        ends = [fill.decode() for fill in fills.values()] + ["", "0000", "\\udc00"]
        assert not any(whole.fullmatch(text + end) for end in ends)


def test_a_begun_escape_is_finished_in_the_fewest_of_the_vocabulary_s_tokens(smol_tokenizer):
    """The string certificate finishes a token that ends inside an escape with the fewest
    tokens the vocabulary spells it in (SmolLM2 writes ``\\u00ed``'s rest ``00ed`` in three
    tokens, ``0000`` in four and ``face`` in one: with ``0000`` a drawn member spelled with
    ``json.dumps``' default ASCII escapes lost its ``\\u`` at exactly its own budget): per
    escape state, the fill finishes the escape as one character, in no more tokens than the
    fewest bytes would take, and a high surrogate's with its low one."""
    import re

    from hf_fvo.grammar.pushdown.engine import PushdownTokenizer
    from hf_fvo.grammar.pushdown.utf8 import _FILLS, content_state, string_content
    from hf_fvo.grammar.schema.lark import CHAR_REGEX

    vocab = TokenVocabulary.from_tokenizer(smol_tokenizer)
    fewest = PushdownTokenizer(vocab).completer.fewest_tokens
    _, _, fills = string_content(vocab)
    begun = [b"\\", b"\\u", b"\\ud", b"\\u1", b"\\u12", b"\\u123", b"\\udA", b"\\udA3",
             b"\\udA3f", b"\\udA3f\\", b"\\udA3f\\u", b"\\udA3f\\uD"]  # fmt: skip
    for prefix in begun:
        state = content_state(prefix)
        assert state >= 8, prefix
        done = (prefix + fills[state]).decode()
        assert re.fullmatch(CHAR_REGEX, done), (prefix, fills[state])
        assert len(fewest(fills[state])) <= len(fewest(_FILLS[state])), prefix
    assert sorted(content_state(prefix) for prefix in begun) == list(range(8, 20))
    assert len(fewest(fills[content_state(b"\\u")])) == 1


@pytest.mark.parametrize("family", ["tokenizer", "missing"])
def test_each_token_s_character_count_is_the_utf8_characters_that_begin_in_it(family, tokenizer):
    """The budget rule counts a string's characters per token from one vectorised pass over
    the joined vocabulary: per token it equals the bytes that are not UTF-8 continuation
    bytes, for both tokenizer families and for a vocabulary with a token it cannot spell."""
    from hf_fvo.grammar.pushdown.engine import PushdownTokenizer

    if family == "tokenizer":
        vocab = TokenVocabulary.from_tokenizer(tokenizer)
    else:
        vocab = TokenVocabulary([b"a", None, "é".encode(), b"\x80\x80", "€x".encode()], [1])
    counted = PushdownTokenizer(vocab).characters
    expected = [sum((c & 0xC0) != 0x80 for c in b or b"") for b in vocab.token_bytes]
    assert counted.tolist() == expected
