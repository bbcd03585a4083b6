"""Cost of Monte-Carlo rollout Φ per generated position, as a multiple of one target forward.

A Llama of realistic shape with random weights (timing only), the SmolLM2 tokenizer when it is
installed (else a byte vocabulary padded to the model's vocabulary), a JSON-schema grammar, and
``RolloutPhi(k)`` at the positions of a grammar-masked sampled generation. Reported per position:
batched model calls, rollout rows × steps, and wall time ÷ one cached decoding step of the same
model (median of each); the candidates rolled out per position (the estimator's default set:
the smallest top set holding 0.999 of the admissible p·OneStep mass, at least 16), the rows its
memory budget lets run at once, and the process's peak memory (CUDA: the allocator's peak; CPU:
the peak resident set, model included).

Runs wherever torch runs; under ``accelerate launch`` the rollouts split across processes. GPU
figures go to docs/benchmarks.md with the device named.

Usage: python benchmarks/rollout_cost.py [--k 8] [--layers 30 --hidden 576 --heads 9 --kv 3]
           [--positions 16] [--dtype float32|bfloat16] [--horizon 16] [--memory-gib 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import torch
from accelerate import PartialState
from harness import provenance
from transformers import LlamaConfig, LlamaForCausalLM

from hf_fvo import Grammar
from hf_fvo.grammar import TokenVocabulary
from hf_fvo.models.cache import cache_argument, output_cache
from hf_fvo.phi import PhiContext, RolloutPhi, UniformPhi
from hf_fvo.phi.rollout import default_rollout_memory, rollout_rows

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer"},
        "mood": {"enum": ["happy", "sad", "tired"]},
    },
    "required": ["name", "age", "mood"],
}


def _tokenizer(vocab_size: int):
    try:
        from hf_fvo.models import load_default_tokenizer

        return load_default_tokenizer(), "SmolLM2 (49,152 tokens)"
    except Exception:  # not installed on this machine: bytes plus EOS, padded by vocab_size
        return (
            TokenVocabulary([bytes([b]) for b in range(256)] + [None], eos_token_ids=[256]),
            "256 byte tokens + EOS",
        )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--positions", type=int, default=16)
    parser.add_argument("--horizon", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--memory-gib", type=float, default=None,
                        help="the rollout rows' budget (default: the estimator's)")  # fmt: skip
    args = parser.parse_args()
    state = PartialState()
    device = state.device
    dtype = getattr(torch, args.dtype)
    config = LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 8 // 3,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv, max_position_embeddings=2048, eos_token_id=2,
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    tok, tok_name = _tokenizer(args.vocab)
    grammar = Grammar.from_json_schema(SCHEMA, tok, whitespace="", vocab_size=args.vocab,
                                       backend="automaton")  # fmt: skip
    prompt = tuple(range(10, 42))

    # one cached decoding step (context = prompt + 16 tokens)
    ids = torch.tensor([prompt + tuple(range(50, 66))], device=device)
    steps = []
    for _ in range(20):
        out = model(input_ids=ids[:, :-1], use_cache=True)
        _sync(device)
        t0 = time.perf_counter()
        model(input_ids=ids[:, -1:], use_cache=True, **cache_argument(model, output_cache(out)))
        _sync(device)
        steps.append(time.perf_counter() - t0)
    forward = statistics.median(steps[5:])

    memory = None if args.memory_gib is None else int(args.memory_gib * (1 << 30))
    est = RolloutPhi(grammar, model, k=args.k, horizon=args.horizon, seed=0, memory=memory)
    budget = memory if memory is not None else default_rollout_memory(device)
    chunk = rollout_rows(model, len(prompt) + args.positions + args.horizon + 1, args.vocab, budget)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    mask = UniformPhi(grammar)
    generated: tuple[int, ...] = ()
    s = grammar.initial_state
    rows = []
    gen = torch.Generator().manual_seed(0)
    for _ in range(args.positions):
        logits = model(input_ids=torch.tensor([prompt + generated], device=device)).logits[0, -1]
        logits = logits.float().cpu()
        ctx = PhiContext(s, generated, logits, None, prompt)
        calls, tokens = est.forwards, est.rollout_tokens
        _sync(device)
        t0 = time.perf_counter()
        log_phi = est.log_phi(ctx)
        _sync(device)
        seconds = time.perf_counter() - t0
        report = est.reports.get(generated)
        rolled = report.rolled_out if report is not None else 0
        rows.append((est.forwards - calls, est.rollout_tokens - tokens, seconds, rolled))
        # advance by sampling the masked law (random weights: the estimate is not the point)
        w = torch.log_softmax(logits.double(), -1) + mask.log_phi(ctx)
        y = int(torch.multinomial(torch.softmax(w, -1), 1, generator=gen))
        if y in grammar.eos_token_ids:
            break
        generated, s = (*generated, y), grammar.next_state(s, y)
        del log_phi
    calls = statistics.median(r[0] for r in rows)
    tokens = statistics.median(r[1] for r in rows)
    wall = statistics.median(r[2] for r in rows)
    rolled = statistics.median(r[3] for r in rows)
    if device.type == "cuda":
        peak = f"{torch.cuda.max_memory_allocated(device) / (1 << 30):.2f} GiB (CUDA allocator)"
    else:  # ru_maxrss is in KiB on Linux
        peak = f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20):.2f} GiB (RSS)"
    print(
        f"{provenance(device=device)} {state.num_processes} process(es); model: Llama "
        f"{args.layers} layers, hidden "
        f"{args.hidden}, {args.heads} heads ({args.kv} kv), vocab {args.vocab}, {args.dtype}, "
        f"random weights; tokenizer: {tok_name}; k = {args.k}, horizon {args.horizon}"
    )
    print("| k | positions | candidates / position | rows at once (budget) | forwards / position "
          "| rollout tokens / position | one forward | rollout Φ / position | ratio | peak "
          "memory |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {args.k} | {len(rows)} | {rolled:.0f} | {chunk} ({budget / (1 << 30):.1f} GiB) | "
        f"{calls:.0f} | {tokens:.0f} | {forward * 1e3:.2f} ms | {wall * 1e3:.2f} ms | "
        f"{wall / forward:.1f} | {peak} |"
    )


if __name__ == "__main__":
    main()
