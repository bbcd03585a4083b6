"""hf_fvo as a Hub-style ``custom_generate`` folder for ``model.generate``: pass
:data:`CUSTOM_GENERATE` (the folder holding ``custom_generate/generate.py``) as
``custom_generate=`` (with ``trust_remote_code=True``, which Transformers requires even for a
local folder) and the grammar flags as ordinary ``generate`` keywords.

Example:
    >>> import torch
    >>> import hf_fvo
    >>> from hf_fvo import CUSTOM_GENERATE
    >>> from hf_fvo.models import load_default_tokenizer, tiny_random_llama
    >>> tok = load_default_tokenizer()
    >>> model = tiny_random_llama(len(tok), eos_token_id=2)
    >>> g = hf_fvo.Grammar.from_choices(["yes", "no"], tok)
    >>> out = model.generate(torch.tensor([[1, 5]]), custom_generate=CUSTOM_GENERATE,
    ...                      trust_remote_code=True, grammar=g, phi="exact", max_new_tokens=4,
    ...                      do_sample=False)
    >>> tok.decode(out[0, 2:], skip_special_tokens=True) in {"yes", "no"}
    True
"""

from pathlib import Path

CUSTOM_GENERATE = str(Path(__file__).resolve().parent)

__all__ = ["CUSTOM_GENERATE"]
