"""Benchmark suites as Hugging Face ``datasets``, and the runner behind ``hf-fvo bench``.

A suite row names a grammar (``family``: json / regex / choices / dyck / budget, ``grammar``: its
JSON-encoded spec), a ``prompt``, the ``model`` it is meant for (``default``: the model under
test; ``toy_dyck`` and ``bernoulli``: the Markov LMs of the exact-oracle tables), which
``oracle`` applies (``trie``: exact laws by exploring a finite language's token trie; ``markov``:
exact TV over product states; ``sampled``: none) and ``max_new_tokens``. Shipped suites:
``paper`` (seed 000's families) and ``structured`` (tool calls, extraction, API responses, enums,
arrays, optional fields); any JSONL/parquet file or Hub dataset with these columns works too.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hf_fvo.errors import GrammarTooLargeError, InvalidArgumentError
from hf_fvo.eval.audit import _two_sample_tv
from hf_fvo.eval.laws import TerminalLaw, sampling_law, sampling_law_on
from hf_fvo.eval.product import product_tv
from hf_fvo.eval.reference import importance_sample
from hf_fvo.eval.stats import empirical_tv, null_tv_percentiles
from hf_fvo.generation import generate
from hf_fvo.generation.particles import sample_particles
from hf_fvo.grammar import Grammar
from hf_fvo.grammar.vocabulary import BRACKETS
from hf_fvo.models.chat import chat_prompt
from hf_fvo.phi import ExactPhi, PrefixLM

__all__ = ["COLUMNS", "SUITES", "load_suite", "run_row", "suite_grammar", "suite_model"]

SUITES = {p.stem: p for p in sorted((Path(__file__).parent / "suites").glob("*.jsonl"))}
COLUMNS = ("name", "family", "grammar", "prompt", "model", "oracle", "max_new_tokens")
# The toy LM of the Dyck tables: order 1 over "(", ")", EOS, BOS (rows: next-token probabilities);
# it prefers opening brackets and mostly stops after a closing one.
TOY_DYCK = [
    [0.55, 0.40, 0.05, 0.0],  # after "("
    [0.35, 0.35, 0.30, 0.0],  # after ")"
    [0.25, 0.25, 0.50, 0.0],  # after EOS
    [0.90, 0.05, 0.05, 0.0],  # after BOS (the prompt)
]


def load_suite(name: str) -> Any:
    """A suite as a ``datasets.Dataset``: ``"paper"``, ``"structured"``, a local .jsonl/.json/
    .parquet file, or a Hub dataset id (online only).

    Raises:
        FileNotFoundError: neither a shipped suite nor an existing file, and not a Hub id.
        ValueError: the dataset lacks a required column.

    Example:
        >>> from hf_fvo.eval.bench import load_suite
        >>> suite = load_suite("paper")
        >>> len(suite) > 10 and set(suite.column_names) >= {"grammar", "oracle"}
        True
    """
    import datasets

    datasets.disable_progress_bars()
    if name in SUITES:
        ds = datasets.load_dataset("json", data_files=str(SUITES[name]), split="train")
    elif Path(name).is_file():
        kind = "parquet" if name.endswith(".parquet") else "json"
        ds = datasets.load_dataset(kind, data_files=name, split="train")
    elif "/" in name and not Path(name).exists() and not name.startswith((".", "/")):
        ds = datasets.load_dataset(name, split="train")
    else:
        raise FileNotFoundError(
            f"no suite {name!r}: use one of {sorted(SUITES)}, a .jsonl/.parquet file or a Hub id"
        )
    missing = [c for c in COLUMNS if c not in ds.column_names]
    if missing:
        raise InvalidArgumentError(f"suite {name!r} lacks the columns {missing}")
    return ds


def suite_model(row: dict, default: Any) -> Any:
    """The model a row is meant for: ``default``, or one of the exact-oracle Markov LMs."""
    from hf_fvo.models import MarkovLM

    if row["model"] == "default":
        return default
    if row["model"] == "toy_dyck":
        return MarkovLM.from_table(TOY_DYCK, bos_token_id=3, eos_token_id=2, pad_token_id=2)
    if row["model"] == "bernoulli":
        p1, e = json.loads(row["grammar"])["p1"], 0.05  # any EOS probability gives the same laws
        return MarkovLM.from_table([[(1 - e) * (1 - p1), (1 - e) * p1, e]] * 3, eos_token_id=2,
                                   pad_token_id=2)  # fmt: skip
    raise InvalidArgumentError(f"row {row['name']!r}: unknown model {row['model']!r}")


def suite_grammar(row: dict, tokenizer: Any, vocab_size: int) -> tuple[Grammar, tuple[int, ...]]:
    """The row's grammar and prompt token ids (chat template for ``default`` models)."""
    spec = json.loads(row["grammar"])
    family = row["family"]
    if family == "dyck":
        return Grammar.dyck(spec["depth"], spec["max_length"], BRACKETS), (3,)
    if family == "budget":
        g = Grammar.budget(spec["n"], spec["k"], zero=0, one=1, eos_token_id=2, vocab_size=3)
        return g, (0,)
    if family == "json":
        backend = "automaton" if row["oracle"] in ("trie", "markov") else "pushdown"
        g = Grammar.from_json_schema(spec, tokenizer, whitespace="", vocab_size=vocab_size,
                                     backend=backend)  # fmt: skip
    elif family == "regex":
        g = Grammar.from_regex(spec, tokenizer, vocab_size=vocab_size)
    elif family == "choices":
        g = Grammar.from_choices(spec, tokenizer, vocab_size=vocab_size)
    else:
        raise InvalidArgumentError(f"row {row['name']!r}: unknown family {family!r}")
    return g, chat_prompt(tokenizer, row["prompt"])


def run_row(
    row: dict,
    model: Any,
    tokenizer: Any,
    *,
    phi: str = "exact",
    draft: Any = None,
    samples: int = 100,
    tol: float = 1e-6,
    proj_tol: float = 1e-3,
    sampled_phi: str = "onestep",
    max_nodes: int = 50_000,
    seed: int = 0,
    particles: int = 0,
    beams: int = 0,
) -> dict:
    """Measure one suite row: exact TV(μ_proj, μ*) and TV(μ_Φ̂, μ*) where an oracle applies, a
    sampled comparison otherwise, and with a ``draft`` FVO-Spec acceptance and tokens/s.
    ``particles`` > 0 adds sequential Monte Carlo (:func:`_particle_row`); ``beams`` > 0, where
    μ* is exact, the mode decoders against μ*'s most likely member (:func:`_mode_row`).

    Trie oracles explore μ* (and exact Φ) until the unexplored mass is at most ``tol``, and
    μ_proj until ``proj_tol``: masking spreads its mass over character-split tokenizations, a
    far larger trie. Each TV is exact up to half the two laws' residuals (``residual``).
    Rows without an oracle (or whose trie exceeds ``max_nodes``, said in ``note``) are sampled;
    there exact Φ is out of reach too, so ``phi="exact"`` samples with ``sampled_phi`` (recorded
    as ``phi``), and both the masked and the Φ̂ draws are compared with an importance-sampled μ*
    reference (:func:`~hf_fvo.eval.reference.importance_sample`): mean length, share cut off
    by the budget, first-token law.
    """

    model = suite_model(row, model)
    g, prompt = suite_grammar(row, tokenizer, model.config.vocab_size)
    budget = int(row["max_new_tokens"])
    out: dict[str, Any] = {"name": row["name"], "family": row["family"],
                           "oracle": row["oracle"], "phi": phi}  # fmt: skip
    t0 = time.perf_counter()
    star = None  # μ* over token sequences, where a trie oracle computed it
    if row["oracle"] == "markov":
        out["tv_proj_star"] = product_tv(g, model, prompt, "uniform", "exact",
                                         max_new_tokens=budget).tv  # fmt: skip
        out["tv_phi_star"] = product_tv(g, model, prompt, phi, "exact", max_new_tokens=budget).tv
        out["exact"] = True
    elif row["oracle"] == "trie":
        lm = PrefixLM(model, batch_size=64, cache_rows=20_000)  # rows shared by the laws
        exact = ExactPhi(g, lm, tol=tol, max_nodes=max_nodes)
        try:
            # μ* on exact Φ's own exploration: one best-first exploration serves both
            explored = exact.root_exploration(prompt)
            star = TerminalLaw.from_log_weights(explored.completions(), explored.residual)
            proj = sampling_law(g, lm, prompt, "uniform", tol=proj_tol, max_nodes=max_nodes)
            # μ_Φ̂'s steps take p_t from the same rows as μ* (float32 forwards repeated in
            # another batch differ at ~1e-7, which would swamp exact Φ's ~1e-15)
            mine = sampling_law_on(g, lm, prompt, exact if phi == "exact" else phi, star.probs,
                                   exploration=explored)  # fmt: skip
        except GrammarTooLargeError:
            out["exact"] = False
            out["note"] = (
                f"trie oracle out of reach: more than max_nodes={max_nodes} forwards "
                f"at tol={tol:g} (μ*) / proj_tol={proj_tol:g} (μ_proj); sampled instead"
            )
        else:
            text = lambda s: tokenizer.decode([t for t in s if t not in g.eos_token_ids])  # noqa: E731
            out["tv_proj_star"] = proj.tv(star)
            out["tv_proj_star_strings"] = proj.pushforward(text).tv(star.pushforward(text))
            out["tv_phi_star"] = mine.tv(star) + mine.residual / 2
            out["residual"] = star.residual + proj.residual
            out["exact"] = True
    else:
        out["exact"] = False
    if not out["exact"] and phi == "exact":
        # no oracle, so exact Φ has no trie it can explore either: sample with the fallback
        phi = out["phi"] = sampled_phi
    if not out["exact"] and samples >= 2:
        torch.manual_seed(seed)
        ids = torch.tensor([prompt]).expand(samples, -1)
        draws, seconds = {}, {}
        for name in ("uniform", phi):
            t1 = time.perf_counter()
            seqs = generate(model, ids, grammar=g, phi=name, max_new_tokens=budget,
                            do_sample=True, top_k=0)[:, len(prompt) :].tolist()  # fmt: skip
            seconds[name] = time.perf_counter() - t1
            draws[name] = [tuple(s[: s.index(g.eos_token_id) + 1] if g.eos_token_id in s else s)
                           for s in seqs]  # fmt: skip
        masked, reweighted = ([str(s) for s in draws[k]] for k in ("uniform", phi))
        tv, p95 = _two_sample_tv(masked, reweighted, np.random.default_rng(seed))
        out.update(sampled_tv=tv, sampled_null_p95=p95, samples=samples,
                   phi_overhead=seconds[phi] / seconds["uniform"])  # fmt: skip
        out.update(_against_reference(model, prompt, g, budget, draws["uniform"], draws[phi],
                                      samples, seed))  # fmt: skip
    if draft is not None and row["model"] == "default" and samples:
        torch.manual_seed(seed)
        accepted = proposed = tokens = 0
        t1 = time.perf_counter()
        for _ in range(samples):
            res = generate(model, torch.tensor([prompt]), grammar=g, phi=phi,
                           assistant_model=draft, do_sample=True, top_k=0,
                           max_new_tokens=budget, return_dict_in_generate=True)  # fmt: skip
            accepted += sum(res.speculation.accepted)
            proposed += res.speculation.candidates
            tokens += res.sequences.shape[1] - len(prompt)
        out.update(acceptance=accepted / max(proposed, 1),
                   tokens_per_s=tokens / (time.perf_counter() - t1))  # fmt: skip
    if particles and samples:
        out.update(_particle_row(model, g, prompt, budget, particles, samples, seed,
                                 star if out["exact"] else None))  # fmt: skip
    if beams and star is not None and out["exact"]:
        out.update(_mode_row(model, g, prompt, budget, beams, star))
    out["seconds"] = time.perf_counter() - t0
    return out


def _particle_row(
    model: Any,
    g: Grammar,
    prompt: tuple[int, ...],
    budget: int,
    particles: int,
    samples: int,
    seed: int,
    star: TerminalLaw | None,
) -> dict:
    """``samples`` independent runs of ``particles`` particles (the masked proposal), one output
    drawn from each: seconds per output, the median log Ẑ and smallest ESS of the runs, and
    where μ* is exact the TV of the outputs' law to it beside the 95th percentile of that TV
    for as many draws from μ* itself."""
    torch.manual_seed(seed)
    ids, eos = torch.tensor([prompt]), g.eos_token_id
    draws, log_z, ess = [], [], []
    t0 = time.perf_counter()
    for _ in range(samples):
        found = sample_particles(model, ids, grammar=g, particles=particles,
                                 max_new_tokens=budget)  # fmt: skip
        row = found.sequences[int(found.draw(1)), len(prompt) :].tolist()
        draws.append(tuple(row[: row.index(eos) + 1]))
        log_z.append(found.report.log_z)
        ess.append(found.report.min_ess)
    out = {"particles": particles, "smc_seconds": (time.perf_counter() - t0) / samples,
           "smc_log_z": float(np.median(log_z)), "smc_min_ess": float(np.median(ess))}  # fmt: skip
    if star is not None:
        out["tv_smc_star"] = empirical_tv(draws, star)
        out["tv_smc_null_p95"] = null_tv_percentiles(star, samples, q=(0.95,), seed=seed)[0]
    return out


def _mode_row(
    model: Any, g: Grammar, prompt: tuple[int, ...], budget: int, beams: int, star: TerminalLaw
) -> dict:
    """Greedy masking, ``beams`` beams scored by log p(x) (``length_penalty=0.0``,
    ``early_stopping="never"``) and two look-ahead beams (exact Φ: a running beam scored
    log p(prefix) + log Φ(prefix)) against μ*'s most likely member: whether each returned it,
    and how far below it each output's μ* log-probability lies (0: the mode; ``inf`` outside
    the explored support)."""
    mode = max(star.probs, key=star.probs.get)
    ids, eos, out = torch.tensor([prompt]), g.eos_token_id, {"beams": beams}
    canonical = {"length_penalty": 0.0, "early_stopping": "never"}
    runs = {"greedy": {}, "beam": {"num_beams": beams, **canonical},
            "lookahead": {"num_beams": 2, "phi": "exact", **canonical}}  # fmt: skip
    for key, kwargs in runs.items():
        t0 = time.perf_counter()
        row = generate(model, ids, grammar=g, do_sample=False, max_new_tokens=budget,
                       **kwargs)[0, len(prompt) :].tolist()  # fmt: skip
        x = tuple(row[: row.index(eos) + 1]) if eos in row else tuple(row)
        p = star.probs.get(x, 0.0)
        out[f"{key}_is_mode"] = x == mode
        out[f"{key}_gap"] = float(np.log(star.probs[mode]) - np.log(p)) if p else float("inf")
        out[f"{key}_seconds"] = time.perf_counter() - t0
    return out


def _against_reference(
    model: Any,
    prompt: tuple[int, ...],
    g: Grammar,
    budget: int,
    masked: list[tuple[int, ...]],
    reweighted: list[tuple[int, ...]],
    samples: int,
    seed: int,
) -> dict:
    """Masked and Φ̂ draws beside an importance-sampled μ* reference (its own ``samples`` masked
    draws weighted by p/q): mean length (± its standard error), share of draws the budget cut
    off before EOS, and the TV of the first-token law to the reference's, with the 95th
    percentile of that TV for ``samples`` draws of the reference's own weighted law (a draw set
    consistent with μ* stays below it, up to the reference's own noise)."""
    ref = importance_sample(model, torch.tensor([prompt]), g, samples, max_new_tokens=budget,
                            seed=seed + 1, batch_size=min(samples, 64))  # fmt: skip
    if not ref.weights.any():
        return {"ref_ess": 0.0}
    first = ref.law(lambda x: x[0])
    ref_first = {k: p for k, (p, _) in first.items()}

    def first_tv(draws: list[tuple[int, ...]]) -> float:
        emp: dict[int, float] = {}
        for d in draws:
            emp[d[0]] = emp.get(d[0], 0.0) + 1 / len(draws)
        return 0.5 * sum(abs(emp.get(k, 0.0) - ref_first.get(k, 0.0)) for k in {*emp, *ref_first})

    rng = np.random.default_rng(seed)
    w = ref.weights
    null = [first_tv([ref.sequences[i] for i in rng.choice(len(w), size=len(masked), p=w)])
            for _ in range(200)]  # fmt: skip
    eos = set(g.eos_token_ids)
    out = {"ref_ess": ref.ess}
    out["ref_length"], out["ref_length_se"] = ref.estimate(len)
    for key, draws in (("masked", masked), ("phi", reweighted)):
        lengths = np.array([len(d) for d in draws], dtype=float)
        out[f"length_{key}"] = float(lengths.mean())
        out[f"length_{key}_se"] = float(lengths.std(ddof=1) / np.sqrt(len(lengths)))
        out[f"capped_{key}"] = float(np.mean([not (d and d[-1] in eos) for d in draws]))
        out[f"first_tv_{key}"] = first_tv(draws)
    out["first_tv_null_p95"] = float(np.quantile(null, 0.95))
    return out


def markdown(results: list[dict]) -> str:
    """The results as a markdown table (blank cells where a measure does not apply)."""
    cols = [("name", "row"), ("oracle", "oracle"), ("phi", "Φ̂"), ("tv_proj_star", "TV(μ_proj, μ*)"),
            ("tv_proj_star_strings", "… over texts"), ("tv_phi_star", "TV(μ_Φ̂, μ*)"),
            ("residual", "laws' residual"),
            ("sampled_tv", "TV(masked, Φ̂) sampled"), ("sampled_null_p95", "null p95"),
            ("phi_overhead", "Φ̂ time ÷ masking"), ("ref_ess", "μ* ref. ESS"),
            ("ref_length", "μ* length (IS)"), ("length_masked", "masked length"),
            ("length_phi", "Φ̂ length"), ("capped_masked", "masked capped"),
            ("capped_phi", "Φ̂ capped"), ("first_tv_masked", "first-token TV masked–μ*"),
            ("first_tv_phi", "… Φ̂–μ*"), ("first_tv_null_p95", "… null p95"),
            ("particles", "particles N"), ("tv_smc_star", "TV(SMC, μ*)"),
            ("tv_smc_null_p95", "… null p95"), ("smc_log_z", "log Ẑ (median)"),
            ("smc_min_ess", "min ESS (median)"), ("smc_seconds", "s per SMC output"),
            ("beams", "beams"), ("beam_is_mode", "beams = μ* mode"),
            ("beam_gap", "beams' log-gap to the mode"), ("greedy_is_mode", "greedy = mode"),
            ("greedy_gap", "greedy's log-gap"), ("lookahead_is_mode", "2 look-ahead beams = mode"),
            ("lookahead_gap", "look-ahead's log-gap"),
            ("acceptance", "acceptance"),
            ("tokens_per_s", "tokens/s"), ("seconds", "seconds")]  # fmt: skip
    lines = ["| " + " | ".join(c[1] for c in cols) + " |", "|" + "---|" * len(cols)]
    for r in results:
        cells = []
        for key, _ in cols:
            v = r.get(key)
            cells.append("" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['name']}: {r['note']}" for r in results if r.get("note")]
    return "\n".join(lines + (["", *notes] if notes else [])) + "\n"
