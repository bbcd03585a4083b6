"""The prompt a chat model expects around a user's text."""

from __future__ import annotations

from typing import Any

__all__ = ["chat_prompt"]


def chat_prompt(tokenizer: Any, text: str) -> tuple[int, ...]:
    """The prompt's token ids: ``text`` as one user turn in the tokenizer's chat template, with
    the assistant's turn opened; the plain encoding where the tokenizer has no template.

    Example:
        >>> from hf_fvo.models import chat_prompt, load_default_tokenizer
        >>> tok = load_default_tokenizer()
        >>> tok.decode(chat_prompt(tok, "Hi")).endswith("<|im_start|>assistant\\n")
        True
    """
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True,
                                            return_dict=True)["input_ids"]  # fmt: skip
    else:
        ids = tokenizer(text)["input_ids"]
    return tuple(int(i) for i in ids)
