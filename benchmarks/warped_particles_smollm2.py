"""Particles at any temperature and nucleus on SmolLM2-135M-Instruct: does
``hf_fvo.generate(particles=N, temperature=τ | top_p=…)`` sample q(x)·1[x ∈ L_B]/Z, q the
product of Transformers' warped conditionals?

For each finite schema of benchmarks/schemas.py and each setting, the exact warped law
(:func:`hf_fvo.eval.grammar_conditional_law` with the same warpers ``generate`` builds) beside
``--draws`` outputs of independent runs with one particle (masking the warped model) and with
``--particles`` N under each twist of ``--phi``: TV over token sequences and over decoded
strings, each next to the null 99th percentile of TV for that many draws from the exact law;
the unwarped μ*'s TV for scale. A run whose particles all died (a truncating warper leaves no
admissible token with mass at some prefix: ``ConstraintConflictError``) gives no output and is
counted.

Usage: python benchmarks/warped_particles_smollm2.py [--schemas A] [--draws 100]
           [--particles 64] [--phi uniform,exact] [--write]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import torch
from harness import machine, versions, write_section
from schemas import compiled, select
from transformers import TemperatureLogitsWarper, TopPLogitsWarper

import hf_fvo
from hf_fvo.errors import ConstraintConflictError
from hf_fvo.eval import TerminalLaw, empirical_tv, grammar_conditional_law, null_tv_percentiles
from hf_fvo.models import load_default_model, load_default_tokenizer
from hf_fvo.phi import PrefixLM

SECTION = "## Particles at temperature 0.5 and top_p 0.9 on SmolLM2 (the warped μ*)"
MAX_NEW = 48
SETTINGS = {
    "temperature=0.5": ({"temperature": 0.5}, [TemperatureLogitsWarper(0.5)]),
    "top_p=0.9": ({"top_p": 0.9}, [TopPLogitsWarper(0.9)]),
}


def _strings(law: TerminalLaw, text) -> TerminalLaw:
    merged: Counter = Counter()
    for seq, p in law.probs.items():
        merged[text(seq)] += p
    return TerminalLaw(dict(merged), law.residual)


def _draws(model, ids, grammar, n, phi, draws, seed, warp):
    """(outputs, runs whose particles all died, seconds)."""
    torch.manual_seed(seed)
    eos = grammar.eos_token_id
    out, died, t0 = [], 0, time.perf_counter()
    for _ in range(draws):  # one run per output: independent draws
        try:
            row = hf_fvo.generate(model, ids, grammar=grammar, particles=n, phi=phi,
                                  do_sample=True, max_new_tokens=MAX_NEW, **warp)[0]  # fmt: skip
        except ConstraintConflictError:
            died += 1
            continue
        seq = row[ids.shape[1] :].tolist()
        out.append(tuple(seq[: seq.index(eos) + 1]))
    return out, died, time.perf_counter() - t0


def run(keys: list[str], draws: int, particles: int, twists: list[str], tol: float) -> str:
    tok, model = load_default_tokenizer(), load_default_model()
    text = lambda seq: tok.decode(seq, skip_special_tokens=True)  # noqa: E731
    lines = [
        SECTION,
        "",
        f"Command: `python benchmarks/warped_particles_smollm2.py --draws {draws} "
        f"--particles {particles} --phi {','.join(twists)} --write`. "
        f"Machine: {machine()}, {versions()}; "
        "SmolLM2-135M-Instruct float32, `OMP_NUM_THREADS=1`; the exact warped law explored "
        f"until its unexplored mass is at most {tol:g}; each output from its own particle run; "
        "TV columns over token sequences (and decoded strings), each with the null 99th "
        "percentile for that many draws from the exact warped law.",
        "",
        "| schema | setting | TV(warped μ*, μ*) | sampler | outputs (runs died) | TV tokens | "
        "null p99 | TV strings | null p99 | s per run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key in keys:
        prompt, g = compiled(key, tok, model.config.vocab_size)
        ids = torch.tensor([prompt])
        lm = PrefixLM(model, batch_size=64, cache_rows=20_000)
        star = grammar_conditional_law(g, lm, prompt, tol=tol, max_nodes=200_000)
        for name, (warp, warpers) in SETTINGS.items():
            law = grammar_conditional_law(g, lm, prompt, tol=tol, max_nodes=200_000,
                                          warpers=warpers)  # fmt: skip
            strings = _strings(law, text)
            samplers = [(1, "uniform"), *((particles, phi) for phi in twists)]
            for seed, (n, phi) in enumerate(samplers, start=3):
                out, died, seconds = _draws(model, ids, g, n, phi, draws, seed, warp)
                what = "1 particle (masking)" if n == 1 else f"{n} particles, phi={phi}"
                cells = ["—"] * 4
                if out:
                    _, p99 = null_tv_percentiles(law, len(out), seed=1)
                    _, p99_s = null_tv_percentiles(strings, len(out), seed=2)
                    tv_s = empirical_tv([text(s) for s in out], strings)
                    cells = [f"{empirical_tv(out, law):.3f}", f"{p99:.3f}", f"{tv_s:.3f}",
                             f"{p99_s:.3f}"]  # fmt: skip
                lines.append(
                    f"| {key} | {name} | {law.tv(star):.3f} | {what} | {len(out)} ({died}) | "
                    f"{' | '.join(cells)} | {seconds / draws:.2f} |"
                )
                print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--schemas", nargs="+", default=["A"])
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--particles", type=int, default=64)
    ap.add_argument("--phi", default="uniform,exact", help="the twists of the N-particle rows")
    ap.add_argument("--tol", type=float, default=1e-6)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    body = run(select(args.schemas), args.draws, args.particles, args.phi.split(","), args.tol)
    print(body)
    if args.write:
        write_section(SECTION, body)


if __name__ == "__main__":
    main()
