"""Learned Φ: a small network over per-candidate grammar features, stored on the Hugging Face Hub.

:class:`PhiModel` maps the features of :mod:`hf_fvo.phi.features` to a score s and
log Φ̂(y) = log σ(s). It is trained (``hf-fvo train-phi``) on exact Φ labels with a listwise loss,
KL(μ*_t ‖ μ̂_t) per position, which only the relative Φ̂ values and their level against EOS
(Φ = 1) can lower; Φ̂ ≡ 1 (masking) is inside the model class, so training never has to do
worse than masking on its own data. :class:`LearnedPhi` is the estimator (``phi="learned"``).

Checkpoints are Hub folders written by huggingface_hub's :class:`~huggingface_hub.ModelHubMixin`:
``model.safetensors`` (only safetensors are read), ``config.json`` (architecture, the base models
and tokenizers it was trained for, training data, metrics) and a model card. A checkpoint used
with another tokenizer or base model raises :class:`~hf_fvo.errors.WeightsMismatchError`. The
package ships weights for the embedded SmolLM2 (``phi="learned"`` uses them, offline).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import ModelHubMixin, hf_hub_download

from hf_fvo.errors import (
    InvalidArgumentError,
    OutsideTrainingWarning,
    WeightsMismatchError,
)
from hf_fvo.grammar import Grammar
from hf_fvo.phi.base import PhiContext, PhiEstimator, no_dead_row
from hf_fvo.phi.features import FEATURE_NAMES, candidate_features

__all__ = [
    "DEFAULT_OPEN_WEIGHTS",
    "DEFAULT_WEIGHTS",
    "LearnedPhi",
    "PhiModel",
    "default_weights",
    "model_fingerprint",
]

DEFAULT_WEIGHTS = Path(__file__).parent / "weights" / "smollm2-135m-instruct"
DEFAULT_OPEN_WEIGHTS = Path(__file__).parent / "weights" / "smollm2-135m-instruct-open"
DOMAINS = ("finite", "any")  # the grammars a checkpoint's labels came from
MARKOV_FAMILY = "markov-lm"  # fingerprint of every hf_fvo MarkovLM (trained across random ones)

_CARD_TITLE = "# Learned future-validity estimator (hf_fvo)"
_CARD = """---
{{ card_data }}
---

# Learned future-validity estimator (hf_fvo)

A per-candidate estimate of Φ_t(y) = Pr[valid completion | prefix, y] for grammar-constrained
sampling of μ* = p(x)·1[x∈L]/Z with [hf_fvo](https://pypi.org/project/hf-fvo/):
`hf_fvo.generate(model, ids, grammar=g, phi=PhiModel.from_pretrained(...))`.

- Base model: {{ base_model_name }}
- Base model fingerprints: {{ base_models }}
- Tokenizer fingerprints: {{ tokenizers }}
- Grammars it was trained on: {{ domain }}
- Features: {{ features }}

## Training data
{{ training }}

## Metrics
{{ metrics }}
"""


def model_fingerprint(model: Any) -> str:
    """Identity of a base model's weights: ``"markov-lm"`` for hf_fvo's Markov LMs (learned Φ for
    them is trained across random tables), else the model type and a digest of the first rows of
    its input embeddings (float32).

    Example:
        >>> from hf_fvo.models import tiny_random_llama
        >>> from hf_fvo.phi.learned import model_fingerprint
        >>> model_fingerprint(tiny_random_llama(16, seed=0)).startswith("llama:")
        True
    """
    from hf_fvo.models.markov import MarkovLM
    from hf_fvo.phi.lm import PrefixLM

    if isinstance(model, PrefixLM):
        model = model.model
    if isinstance(model, MarkovLM):
        return MARKOV_FAMILY
    embed = model.get_input_embeddings().weight[:64].detach().float().cpu().contiguous()
    digest = hashlib.sha256(embed.numpy().tobytes()).hexdigest()[:16]
    return f"{model.config.model_type}:{digest}"


class PhiModel(
    torch.nn.Module,
    ModelHubMixin,
    library_name="hf-fvo",
    tags=["hf-fvo", "constrained-decoding", "future-validity"],
    model_card_template=_CARD,
):
    """Score network of the learned estimator: features → s, log Φ̂ = log σ(s).

    Args:
        hidden: Width of the two hidden layers.
        feature_names: The features it reads, in order (checked against this hf_fvo's).
        base_model: Human-readable name of the base model (for the model card).
        base_models: :func:`model_fingerprint` values it may be used with (empty: any).
        tokenizers: Grammar tokenizer fingerprints it may be used with (empty: any).
        training: Description of the training data (JSON-serialisable).
        metrics: Measured quality (JSON-serialisable).
        domain: The grammars the labels came from: ``"finite"`` (finite languages only; on
            any other grammar :class:`LearnedPhi` falls back to masking) or ``"any"`` (labels
            from infinite languages too, e.g. rollouts on open schemas).

    Example:
        >>> import tempfile, torch
        >>> from hf_fvo.phi import PhiModel
        >>> net = PhiModel(hidden=8)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     net.save_pretrained(d)
        ...     back = PhiModel.from_pretrained(d)
        >>> x = torch.randn(3, len(net.feature_names))
        >>> bool(torch.equal(net(x), back(x)))
        True
    """

    def __init__(
        self,
        *,
        hidden: int = 32,
        feature_names: list[str] | tuple[str, ...] = FEATURE_NAMES,
        base_model: str | None = None,
        base_models: list[str] | None = None,
        tokenizers: list[str] | None = None,
        training: dict | None = None,
        metrics: dict | None = None,
        domain: str = "finite",
    ) -> None:
        super().__init__()
        if domain not in DOMAINS:
            raise InvalidArgumentError(f"domain must be one of {DOMAINS}, got {domain!r}")
        if list(feature_names) != list(FEATURE_NAMES):
            raise WeightsMismatchError(
                f"these weights read the features {list(feature_names)}, but this hf_fvo computes "
                f"{list(FEATURE_NAMES)}; retrain them with `hf-fvo train-phi`"
            )
        d = len(FEATURE_NAMES)
        self.hidden = int(hidden)
        self.feature_names = list(feature_names)
        self.base_model = base_model
        self.base_models = list(base_models or [])
        self.tokenizers = list(tokenizers or [])
        self.training_data = dict(training or {})
        self.metrics = dict(metrics or {})
        self.domain = domain
        self.register_buffer("mean", torch.zeros(d))
        self.register_buffer("scale", torch.ones(d))
        self.linear = torch.nn.Linear(d, 1)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(d, self.hidden), torch.nn.SiLU(),
            torch.nn.Linear(self.hidden, self.hidden), torch.nn.SiLU(),
            torch.nn.Linear(self.hidden, 1),
        )  # fmt: skip
        with torch.no_grad():  # start at Φ̂ ≈ 1 everywhere: masking
            self.linear.weight.zero_()
            self.linear.bias.fill_(6.0)
            self.mlp[-1].weight.zero_()
            self.mlp[-1].bias.zero_()

    @property
    def config(self) -> dict:
        """The ``config.json`` content."""
        return {"hidden": self.hidden, "feature_names": self.feature_names,
                "base_model": self.base_model, "base_models": self.base_models,
                "tokenizers": self.tokenizers, "training": self.training_data,
                "metrics": self.metrics, "domain": self.domain}  # fmt: skip

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """log Φ̂ per row of ``features`` (shape (..., len(FEATURE_NAMES)))."""
        x = (features.float() - self.mean) / self.scale
        return torch.nn.functional.logsigmoid((self.linear(x) + self.mlp(x)).squeeze(-1))

    def check(self, grammar: Grammar, model: Any = None) -> None:
        """Raise :class:`~hf_fvo.errors.WeightsMismatchError` unless these weights were trained for
        ``grammar``'s tokenizer and (when given) ``model``."""
        if self.tokenizers and grammar.tokenizer_fingerprint not in self.tokenizers:
            raise WeightsMismatchError(
                f"these learned-Φ weights (base model {self.base_model}) were trained for other "
                f"tokenizers than the one {grammar.source} was compiled for; train weights for "
                "it with `hf-fvo train-phi`, or use another estimator"
            )
        if model is not None and self.base_models:
            found = model_fingerprint(model)
            if found not in self.base_models:
                raise WeightsMismatchError(
                    f"these learned-Φ weights were trained for {self.base_model} "
                    f"({', '.join(self.base_models)}), not for this model ({found}); train "
                    "weights for it with `hf-fvo train-phi`, or use another estimator"
                )

    # -- Hub I/O (safetensors only) -----------------------------------------------------------

    def _save_pretrained(self, save_directory: Path) -> None:
        from safetensors.torch import save_model

        save_model(self, str(Path(save_directory) / "model.safetensors"))

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> str | None:
        """Write ``model.safetensors``, ``config.json`` and ``README.md`` (the model card) to
        ``save_directory``; ``push_to_hub=True, repo_id=...`` uploads them too."""
        kwargs.setdefault("config", self.config)
        old = Path(save_directory) / "README.md"
        if old.is_file() and _CARD_TITLE in old.read_text(encoding="utf-8"):
            old.unlink()  # our card for earlier weights (huggingface_hub keeps an existing one)
        card = dict(base_model_name=self.base_model or "unspecified",
                    base_models=", ".join(self.base_models) or "any",
                    tokenizers=", ".join(self.tokenizers) or "any",
                    features=", ".join(self.feature_names),
                    domain=("finite languages only (elsewhere the estimator falls back to "
                            "masking)" if self.domain == "finite" else "finite and infinite"),
                    training=_as_list(self.training_data),
                    metrics=_as_list(self.metrics))  # fmt: skip
        kwargs.setdefault("model_card_kwargs", card)
        return super().save_pretrained(save_directory, **kwargs)

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: str | None,
        cache_dir: str | Path | None,
        force_download: bool,
        local_files_only: bool,
        token: str | bool | None,
        **model_kwargs: Any,
    ) -> PhiModel:
        from safetensors.torch import load_model

        if Path(model_id).is_dir():
            path = Path(model_id) / "model.safetensors"
            if not path.is_file():
                raise WeightsMismatchError(f"{model_id} holds no model.safetensors")
        else:
            path = hf_hub_download(repo_id=model_id, filename="model.safetensors",
                                   revision=revision, cache_dir=cache_dir,
                                   force_download=force_download, token=token,
                                   local_files_only=local_files_only)  # fmt: skip
        with torch.random.fork_rng(devices=[]):  # the layers' random init is overwritten:
            model = cls(**model_kwargs)  # loading must not move the caller's random stream
        load_model(model, str(path), strict=True)
        return model.eval()


def default_weights(grammar: Grammar, model: Any = None) -> PhiModel:
    """The shipped weights for ``grammar`` (and ``model``): those trained on exact labels of
    finite languages and Markov families where the language is known to be finite, else those
    trained on path labels of open real schemas (domain ``"any"``) where they fit the grammar's
    tokenizer and the model; otherwise the finite ones (which refuse other tokenizers and models
    and are masking on open grammars).

    Example:
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.models import load_default_tokenizer
        >>> from hf_fvo.phi.learned import default_weights
        >>> tok = load_default_tokenizer()
        >>> default_weights(Grammar.from_choices(["yes", "no"], tok)).domain
        'finite'
        >>> default_weights(Grammar.from_json_schema({"type": "string"}, tok)).domain
        'any'
    """
    if grammar.is_finite is not True and (DEFAULT_OPEN_WEIGHTS / "model.safetensors").is_file():
        weights = PhiModel.from_pretrained(DEFAULT_OPEN_WEIGHTS)
        try:
            weights.check(grammar, model)
        except WeightsMismatchError:
            pass
        else:
            return weights
    return PhiModel.from_pretrained(DEFAULT_WEIGHTS)


def _as_list(d: dict) -> str:
    return "\n".join(f"- {k}: {json.dumps(v)}" for k, v in d.items()) or "- (none recorded)"


class LearnedPhi(PhiEstimator):
    """Learned future validity (``phi="learned"``): :class:`PhiModel` over the candidate
    features; EOS keeps Φ = 1. On pushdown grammars the candidates carrying ``coverage`` of
    A_t's mass are scored (at most ``max_candidates``), the rest get their p_t-weighted mean,
    reported as ``unscored`` in the diagnostics, as with OneStep.

    Weights trained on finite languages only (``PhiModel.domain == "finite"``) are not used on a
    grammar whose language is not known to be finite: there the estimator is masking (Φ̂ ≡ 1,
    :attr:`is_masking`; its samples equal ``phi="uniform"``'s) and an
    :class:`~hf_fvo.errors.OutsideTrainingWarning` says so once, at construction. (Measured: on open
    real schemas such weights drove most outputs to the token cap; docs/benchmarks.md.) Without
    ``weights``, :func:`default_weights` picks the shipped checkpoint that covers the grammar:
    the finite-language one where the language is known to be finite, else the one trained on
    path labels of open schemas.

    Args:
        grammar: The compiled grammar (either backend).
        model: The base model (only checked against the weights; no forwards are run).
        weights: A :class:`PhiModel`, a folder or Hub id for :meth:`PhiModel.from_pretrained`,
            or ``None`` for the weights shipped for the embedded SmolLM2
            (:func:`default_weights`).

    Raises:
        WeightsMismatchError: the weights were trained for another tokenizer or base model.

    Example:
        >>> import torch
        >>> from hf_fvo import Grammar
        >>> from hf_fvo.phi import LearnedPhi, PhiContext
        >>> from hf_fvo.models import load_default_tokenizer
        >>> g = Grammar.from_choices(["yes", "no"], load_default_tokenizer())
        >>> phi = LearnedPhi(g)  # the shipped weights for SmolLM2
        >>> row = phi.log_phi(PhiContext(g.initial_state, (), torch.zeros(g.vocab_size), 4))
        >>> int(row.isfinite().sum()), bool((row <= 0).all())
        (5, True)
    """

    name = "learned"

    def __init__(
        self,
        grammar: Grammar,
        model: Any = None,
        *,
        weights: PhiModel | str | Path | None = None,
        coverage: float = 0.99,
        max_candidates: int = 32,
    ) -> None:
        super().__init__(grammar, model)
        if weights is None:
            weights = default_weights(grammar, model)
        if isinstance(weights, (str, Path)):
            weights = PhiModel.from_pretrained(weights)
        if not isinstance(weights, PhiModel):
            raise InvalidArgumentError(
                f"weights must be a PhiModel, a folder or a Hub id, got {type(weights).__name__}"
            )
        weights.check(grammar, model)
        self.weights = weights.eval()
        self.coverage, self.max_candidates = coverage, max_candidates
        self._unscored = 0.0
        self.in_domain = weights.domain == "any" or grammar.is_finite is True
        if not self.in_domain:
            warnings.warn(
                f"these learned-Φ weights were trained on finite languages only and "
                f"{grammar.source} is not known to be finite: phi='learned' is masking "
                "(Φ̂ ≡ 1) on it; train weights with open-schema labels (`hf-fvo train-phi "
                "--open N`) to learn Φ there",
                OutsideTrainingWarning,
                stacklevel=2,
            )

    def estimate(self, ctx: PhiContext) -> tuple[torch.Tensor, float]:
        out = self.log_phi(ctx)
        return out, self._unscored

    @property
    def is_masking(self) -> bool:
        return not self.in_domain

    def log_phi(self, ctx: PhiContext) -> torch.Tensor:
        g = self.grammar
        if not self.in_domain:
            self._unscored = 0.0
            mask = g.admissible(ctx.state, ctx.remaining)
            return torch.where(mask, 0.0, -torch.inf).double()
        f = candidate_features(g, ctx, coverage=self.coverage, max_candidates=self.max_candidates)
        mask = f.mask
        out = torch.full((g.vocab_size,), -torch.inf, dtype=torch.float64)
        out[f.eos] = 0.0
        self._unscored = 0.0
        if len(f.tokens):
            with torch.no_grad():
                out[f.tokens] = self.weights(f.features).double()
        if len(f.rest):
            w = f.logp[f.tokens]
            out[f.rest] = torch.logsumexp(w + out[f.tokens], 0) - torch.logsumexp(w, 0)
            total = torch.logsumexp(f.logp[mask], 0)
            self._unscored = float(torch.exp(torch.logsumexp(f.logp[f.rest], 0) - total))
        return no_dead_row(out, mask)

    @classmethod
    def from_pretrained(cls, name_or_path: str | Path, grammar: Grammar, model: Any = None,
                        **kwargs: Any) -> LearnedPhi:  # fmt: skip
        """The estimator for ``grammar`` with weights from a folder or Hub id (offline cache
        honoured, as in :meth:`PhiModel.from_pretrained`)."""
        return cls(grammar, model, weights=PhiModel.from_pretrained(name_or_path), **kwargs)
