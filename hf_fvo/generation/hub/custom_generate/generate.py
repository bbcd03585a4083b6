"""hf_fvo as a Transformers ``custom_generate`` recipe.

    model.generate(input_ids, custom_generate=hf_fvo.CUSTOM_GENERATE, trust_remote_code=True,
                   grammar=g, phi="exact", assistant_model=draft, do_sample=True, max_new_tokens=32)

Keywords added to ``generate``: ``grammar`` (an ``hf_fvo.Grammar``, required), ``phi`` (a
name from ``hf_fvo.phi.ESTIMATORS`` or an estimator), ``prompt_length``, ``grammar_draft`` (the
grammar's spelled-out text as free drafts), ``particles`` (N Φ̂-twisted SMC particles),
``keep_greedy`` (with ``num_beams``: the likelier by log p(x) of greedy's output and the
beams'), and with ``assistant_model=``: ``draft_phi``, ``blind_draft``,
``num_assistant_tokens``. Everything else is ``model.generate``'s own; see ``hf_fvo.generate``.
"""

from __future__ import annotations

from typing import Any

_OWN = ("draft_phi", "grammar_draft", "num_assistant_tokens", "prompt_length")


def generate(model: Any, *args: Any, **kwargs: Any) -> Any:
    from hf_fvo.errors import InvalidArgumentError
    from hf_fvo.generation import generate as fvo_generate

    if kwargs.get("grammar") is None:
        raise InvalidArgumentError(
            "the hf_fvo custom_generate recipe needs grammar=<hf_fvo.Grammar>"
        )
    inputs = args[0] if args else kwargs.pop("inputs", None)
    kwargs.pop("inputs", None)
    if inputs is None:
        inputs = kwargs.pop("input_ids", None)
    # generate() hands over every one of its own parameters, None where unset: drop those, but
    # keep hf_fvo's keywords, which arrive only when the caller set them (draft_phi=None means
    # "mask only", not the default)
    kwargs = {k: v for k, v in kwargs.items() if v is not None or k in _OWN}
    return fvo_generate(model, inputs, **kwargs)
