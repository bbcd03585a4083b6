"""The finite JSON schemas of the SmolLM2 benchmarks (seed 000 Tables 15/16, A–E in spirit),
and the chat prompt that asks for each."""

from __future__ import annotations

from typing import Any

CITIES = [
    "Paris", "Rome", "Oslo", "Lima", "Cairo", "Delhi", "Tokyo", "Seoul", "Quito", "Dakar",
    "Hanoi", "Minsk", "Riga", "Bern", "Doha", "Sofia", "Kyiv", "Baku", "Accra", "Perth",
]  # fmt: skip

SCHEMAS: dict[str, dict[str, Any]] = {
    "A status (3)": {
        "type": "object",
        "properties": {"status": {"enum": ["ok", "error", "pending"]}},
        "required": ["status"],
    },
    "B type/value (4)": {
        "type": "object",
        "properties": {"type": {"enum": ["user", "admin"]}, "active": {"type": "boolean"}},
        "required": ["type", "active"],
    },
    "C action/target (18)": {
        "type": "object",
        "properties": {
            "action": {"enum": ["open", "close", "read", "write", "delete", "move"]},
            "target": {"enum": ["file", "folder", "link"]},
        },
        "required": ["action", "target"],
    },
    "D method/path (24)": {
        "type": "object",
        "properties": {
            "method": {"enum": ["GET", "POST", "PUT", "DELETE"]},
            "path": {"enum": ["/users", "/items", "/orders", "/login", "/logout", "/health"]},
        },
        "required": ["method", "path"],
    },
    "E route/class (2000)": {
        "type": "object",
        "properties": {
            "from": {"enum": CITIES},
            "to": {"enum": CITIES},
            "class": {"enum": ["economy", "premium", "business", "first", "crew"]},
        },
        "required": ["from", "to", "class"],
    },
}


def select(letters: list[str]) -> list[str]:
    """Schema keys whose first letter is in ``letters``."""
    return [key for key in SCHEMAS if key[0] in letters]


def prompt_ids(tokenizer: Any, schema: dict[str, Any]) -> tuple[int, ...]:
    """The chat-template prompt `Reply with a JSON object with <field> in [...], ...`."""
    props = ", ".join(f"{k} in {v.get('enum', 'true/false')}" for k, v in
                      schema["properties"].items())  # fmt: skip
    messages = [{"role": "user", "content": f"Reply with a JSON object with {props}."}]
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
    return tuple(out["input_ids"])


def compiled(key: str, tokenizer: Any, vocab_size: int) -> tuple[tuple[int, ...], Any]:
    """(prompt ids, grammar) for schema ``key``, whitespace-free JSON."""
    from hf_fvo import Grammar

    schema = SCHEMAS[key]
    grammar = Grammar.from_json_schema(schema, tokenizer, whitespace="", vocab_size=vocab_size,
                                       backend="automaton")  # fmt: skip
    return prompt_ids(tokenizer, schema), grammar
