"""The training set behind the shipped learned-Φ weights (``hf-fvo train-phi``).

- Markov families: Dyck and budget languages under Markov LMs of two kinds, random tables
  (softmax of Gaussian logits at three temperatures) and tables fitted to noisy samples of the
  language (what an LM trained on such text looks like), exact Φ by the product-state DP;
- finite JSON schemas (enums and consts, e.g. from the development set) with the real model,
  exact Φ from the explored token trie;
- open JSON schemas with the real model: one-rollout Φ along masked draws (path labels).

Every label is also added with the Φ_iid features hidden (as on a pushdown grammar), so the
weights learn what to do where the surrogate DP is not available.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from hf_fvo.grammar import Grammar
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models.chat import chat_prompt
from hf_fvo.phi.features import FEATURE_NAMES
from hf_fvo.training.labels import Label, markov_labels, path_labels, trie_labels

__all__ = ["MarkovGroup", "build_labels", "enum_schemas", "markov_groups", "without_iid"]

DYCK = [(2, 8), (2, 12), (3, 10), (3, 14), (4, 12), (4, 18), (2, 16), (3, 20), (4, 10), (5, 14)]
BUDGET = [(10, 4), (12, 6), (14, 5), (16, 9), (18, 7), (20, 12), (22, 8), (16, 4), (26, 10),
          (30, 12)]  # fmt: skip
IID = FEATURE_NAMES.index("iid_available")
MarkovGroup = tuple[str, Grammar, Any, tuple[int, ...], int]


def markov_groups(seed: int = 0, lms_per_grammar: int = 6) -> list[MarkovGroup]:
    """(name, grammar, Markov LM, prompt, budget) for every Dyck and budget language of the
    recipe: half the LMs random tables, half fitted to noisy samples of the language.

    Example:
        >>> from hf_fvo.training.corpus import markov_groups
        >>> groups = markov_groups(lms_per_grammar=2)
        >>> len(groups), groups[0][0]
        (40, 'dyck2,8/random0')
    """
    from hf_fvo.models import MarkovLM

    rng = np.random.default_rng(seed)
    temps = (0.5, 1.0, 2.0)
    out: list[MarkovGroup] = []
    for i, (depth, n) in enumerate(DYCK):
        g = Grammar.dyck(depth, n, BRACKETS)
        for j in range(lms_per_grammar):
            kw = dict(bos_token_id=3, eos_token_id=2, pad_token_id=2)
            if j < (lms_per_grammar + 1) // 2:
                lm = MarkovLM.random(4, seed=seed * 1000 + 100 + 10 * i + j,
                                     temperature=temps[j % 3], **kw)  # fmt: skip
                name = f"dyck{depth},{n}/random{j}"
            else:
                lm = MarkovLM.fit(_dyck_text(rng), 4, order=1 + j % 2, add_k=0.5, **kw)
                name = f"dyck{depth},{n}/fitted{j}"
            out.append((name, g, lm, (3,), n + 1))
    for i, (n, k) in enumerate(BUDGET):
        g = Grammar.budget(n, k, zero=0, one=1, eos_token_id=2, vocab_size=3)
        for j in range(lms_per_grammar):
            kw = dict(eos_token_id=2, pad_token_id=2)
            if j < (lms_per_grammar + 1) // 2:
                lm = MarkovLM.random(3, seed=seed * 1000 + 500 + 10 * i + j,
                                     temperature=temps[j % 3], **kw)  # fmt: skip
                name = f"budget{n},{k}/random{j}"
            else:
                lm = MarkovLM.fit(_bits_text(rng, n), 3, order=1, add_k=0.5, **kw)
                name = f"budget{n},{k}/fitted{j}"
            out.append((name, g, lm, (0,), n + 1))
    return out


def _dyck_text(rng: np.random.Generator, count: int = 300) -> list[list[int]]:
    """Bracket strings from a random stack process with random noise (EOS-terminated)."""
    opening, stop = rng.uniform(0.3, 0.75), rng.uniform(0.1, 0.6)
    deepest, noise = int(rng.integers(2, 6)), float(rng.choice([0.0, 0.05, 0.15]))
    out = []
    for _ in range(count):
        depth, seq = 0, []
        while len(seq) < 40:
            if depth == 0 and seq and rng.random() < stop:
                break
            tok = 0 if depth == 0 or (depth < deepest and rng.random() < opening) else 1
            if rng.random() < noise:
                tok = int(rng.integers(0, 2))
            depth = max(depth + (1 if tok == 0 else -1), 0)
            seq.append(tok)
        out.append([*seq, 2])
    return out


def _bits_text(rng: np.random.Generator, n: int, count: int = 300) -> list[list[int]]:
    """Bit strings of about ``n`` symbols with a random share of ones (EOS-terminated)."""
    p1 = rng.uniform(0.2, 0.8)
    return [[int(rng.random() < p1) for _ in range(max(1, n + int(rng.integers(-3, 4))))] + [2]
            for _ in range(count)]  # fmt: skip


def enum_schemas(rows: Iterable[dict], count: int) -> list[tuple[str, dict, str]]:
    """Finite JSON schemas made from the enums of real schemas: (name, schema, prompt) for up
    to ``count`` distinct enums of 2–8 short strings or numbers, one object property each,
    taken in order of the rows (``{"name", "schema"}`` dicts, e.g. the development set).

    Example:
        >>> from hf_fvo.training.corpus import enum_schemas
        >>> rows = [{"name": "s", "schema": {"properties": {"unit": {"enum": ["C", "F"]}}}}]
        >>> enum_schemas(rows, 5)[0][1]["properties"]
        {'unit': {'enum': ['C', 'F']}}
    """
    seen: set = set()
    out: list[tuple[str, dict, str]] = []
    for row in rows:
        for prop, values in _enums(row["schema"], None):
            key = (prop, tuple(map(str, values)))
            if key in seen or len(out) >= count:
                continue
            seen.add(key)
            schema = {"type": "object", "properties": {prop: {"enum": values}},
                      "required": [prop]}  # fmt: skip
            prompt = f"Reply with a JSON object with {prop} in {values}."
            out.append((f"{row['name']}:{prop}", schema, prompt))
    return out


def _enums(node: Any, prop: str | None) -> Iterable[tuple[str, list]]:
    if isinstance(node, dict):
        values = node.get("enum")
        if prop is not None and isinstance(values, list) and 2 <= len(values) <= 8 and all(
            (isinstance(v, str) and 0 < len(v) <= 24 and v.isprintable())
            or (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 10**6)
            for v in values
        ) and len(set(map(str, values))) == len(values):  # fmt: skip
            yield prop, values
        for key, child in node.items():
            if key == "properties" and isinstance(child, dict):
                for name, sub in child.items():
                    if isinstance(name, str) and name.isidentifier() and len(name) <= 24:
                        yield from _enums(sub, name)
            elif key != "enum":
                yield from _enums(child, None)
    elif isinstance(node, list):
        for child in node:
            yield from _enums(child, None)


def without_iid(label: Label) -> Label:
    """The label as a pushdown grammar would see it: Φ_iid features replaced by OneStep's."""
    names = ("log_onestep", "log_phi_iid", "iid_available", "log_phi_iid_flat")
    one, iid, flag, flat = (FEATURE_NAMES.index(n) for n in names)
    feats = [list(f) for f in label["features"]]
    for f in feats:
        f[iid] = f[flat] = f[one]
        f[flag] = 0.0
    return {**label, "features": feats, "group": label["group"] + "/no-iid"}


def build_labels(
    model: Any,
    tokenizer: Any,
    *,
    finite: Iterable[tuple[str, dict, str]] = (),
    open_schemas: Iterable[tuple[str, dict, str]] = (),
    markov: bool = True,
    trajectories: int = 40,
    positions: int = 150,
    tol: float = 1e-4,
    open_draws: int = 4,
    max_new_tokens: int = 192,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Label]:
    """Every label of the recipe; ``progress`` is told each group as it is done.

    Example:
        >>> from hf_fvo.training.corpus import build_labels
        >>> labels = build_labels(None, None, markov=True, trajectories=1)
        >>> sorted({lab["source"] for lab in labels})
        ['markov']
    """
    from hf_fvo.phi.lm import PrefixLM

    out: list[Label] = []

    def add(labels: list[Label], name: str) -> None:
        out.extend(labels)
        out.extend(without_iid(lab) for lab in labels if lab["features"][0][IID] == 1.0)
        progress(f"{name}: {len(labels)} positions")

    if markov:
        for name, g, lm, prompt, budget in markov_groups():
            add(markov_labels(g, lm, prompt, budget, trajectories=trajectories, group=name), name)
    finite, open_schemas = list(finite), list(open_schemas)
    if finite:
        lm = PrefixLM(model, batch_size=64, cache_rows=20_000)
        for name, schema, text in finite:
            g = Grammar.from_json_schema(schema, tokenizer, whitespace="", backend="automaton",
                                         vocab_size=model.config.vocab_size)  # fmt: skip
            labels = trie_labels(g, lm, chat_prompt(tokenizer, text), positions=positions,
                                 tol=tol, group=name)  # fmt: skip
            add(labels, name)
    for k, (name, schema, text) in enumerate(open_schemas):
        g = Grammar.from_json_schema(schema, tokenizer, whitespace="",
                                     vocab_size=model.config.vocab_size)  # fmt: skip
        labels = path_labels(g, model, chat_prompt(tokenizer, text), max_new_tokens,
                             draws=open_draws, seed=k, group=name)  # fmt: skip
        add(labels, name)
    return out
