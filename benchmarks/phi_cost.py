"""Per-step cost of Φ estimation at the SmolLM2 vocabulary, as a ratio to one SmolLM2 forward.

Usage: python benchmarks/phi_cost.py [--repeats 200]
One forward = one cached decoding step of SmolLM2-135M-Instruct (float32, one new token after
a ~60-token context), timed in the same run. Estimator costs are ``log_phi`` at grammar states
visited by greedy masked generation (``learned``: the shipped SmolLM2 weights, features
included); ``exact`` is measured after its trie exploration is cached
(the per-step table lookup), and its one-time exploration cost is reported separately.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import provenance

from hf_fvo import Grammar
from hf_fvo.generation import GrammarLogitsProcessor
from hf_fvo.models import load_default_model, load_default_tokenizer
from hf_fvo.models.cache import cache_argument, output_cache
from hf_fvo.phi import ExactPhi, LearnedPhi, OneStepPhi, PhiContext, PrefixLM, UniformPhi

FREE = {  # a schema with a free-text string: states with ~48k admissible tokens
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
FINITE = {
    "type": "object",
    "properties": {"status": {"enum": ["ok", "error", "pending"]}},
    "required": ["status"],
}


def _timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _contexts(model, tok, grammar, prompt, steps=24):
    """Greedy masked generation; one PhiContext per position."""
    proc = GrammarLogitsProcessor(grammar, prompt_length=prompt.shape[1])
    out = model.generate(prompt, logits_processor=[proc], max_new_tokens=steps, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)  # fmt: skip
    gen = out.sequences[0, prompt.shape[1] :].tolist()
    ctxs, state = [], grammar.initial_state
    for i, logits in enumerate(out.logits):
        if state == grammar.terminal_state:
            break
        ctxs.append(PhiContext(state, tuple(gen[:i]), logits[0], None, tuple(prompt[0].tolist())))
        state = grammar.next_state(state, gen[i])
    return ctxs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    tok, model = load_default_tokenizer(), load_default_model()
    messages = [{"role": "user", "content": "Reply with a JSON object describing a person."}]
    prompt = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                     return_dict=True)["input_ids"]  # fmt: skip
    ctx_ids = torch.cat([prompt, prompt[:, :12]], dim=1)
    past = output_cache(model(ctx_ids[:, :-1], use_cache=True))

    def one_forward():
        cache = type(past)()
        for i, layer in enumerate(past.layers):
            cache.update(layer.keys, layer.values, i)
        model(ctx_ids[:, -1:], use_cache=True, **cache_argument(model, cache))

    forward = statistics.median(_timed(one_forward, args.repeats))
    print(provenance())
    print(f"one SmolLM2 forward (cached decoding step, context {ctx_ids.shape[1]}): "
          f"{forward * 1e3:.1f} ms median\n")  # fmt: skip
    print("| estimator | grammar | per-step median | p99 | ratio to one forward |")
    print("|---|---|---|---|---|")
    vs = model.config.vocab_size
    for label, schema in (("free-text JSON", FREE), ("finite JSON (A)", FINITE)):
        # the finite schema as a token automaton: exact Φ explores its trie without a budget
        backend = "automaton" if schema is FINITE else "pushdown"
        g = Grammar.from_json_schema(schema, tok, whitespace="", vocab_size=vs, backend=backend)
        ctxs = _contexts(model, tok, g, prompt)
        ests = [UniformPhi(g), OneStepPhi(g), LearnedPhi(g)]
        if schema is FINITE:
            exact = ExactPhi(g, PrefixLM(model, batch_size=32), tol=1e-9)
            t0 = time.perf_counter()
            exact.log_phi(ctxs[0])
            explore = time.perf_counter() - t0
            ests.append(exact)
        for est in ests:
            times = []
            for ctx in ctxs:
                times += _timed(lambda e=est, c=ctx: e.log_phi(c), max(1, args.repeats // 20))
            med, p99 = statistics.median(times), sorted(times)[int(0.99 * (len(times) - 1))]
            print(f"| {est.name} | {label} | {med * 1e3:.2f} ms | {p99 * 1e3:.2f} ms | "
                  f"{med / forward:.3f} |")  # fmt: skip
    print(f"\nexact: one-time exploration of the finite schema's trie (tol 1e-9): {explore:.1f} s "
          f"({exact.lm.forwards} prefix forwards, prompt cached)")  # fmt: skip


if __name__ == "__main__":
    main()
