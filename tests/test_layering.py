"""The package's import graph: no cycles, and data flows one way.

errors and lru are at the bottom, then models, then grammar → phi → generation → training,
eval and vllm (the serving adapter) → cli (with the top-level ``hf_fvo`` package). Every
``import`` counts wherever it stands: at module level, inside a function, or under
``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hf_fvo"

# what each part of the package may import from hf_fvo (besides itself)
ALLOWED = {
    "errors": set(),
    "lru": {"errors"},
    "models": {"errors", "lru"},
    "grammar": {"errors", "lru"},
    "phi": {"errors", "lru", "models", "grammar"},
    "generation": {"errors", "lru", "models", "grammar", "phi"},
    "training": {"errors", "lru", "models", "grammar", "phi", "generation"},
    "eval": {"errors", "lru", "models", "grammar", "phi", "generation"},
    "testing": {"errors", "lru", "models", "grammar", "phi", "generation"},
    "vllm": {"errors", "lru", "models", "grammar", "phi", "generation"},
    "cli": {
        "errors",
        "lru",
        "models",
        "grammar",
        "phi",
        "generation",
        "training",
        "eval",
        "__init__",
    },
    "__init__": {"errors", "lru", "models", "grammar", "phi", "generation"},
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """hf_fvo modules ``path`` imports (a name imported from a package is the submodule when
    one has that name, else the package)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]  # fmt: skip
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import hf_fvo.x.y` names module x.y
                target = target.rpartition(".")[0]
            if target.startswith("hf_fvo") and target != name:
                out.add(target)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if state.get(root):
            continue
        stack = [(root, iter(sorted(graph[root])))]
        path = [root]
        state[root] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif not state.get(child):
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_the_import_graph_has_no_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, " → ".join(cycle)


def test_every_import_follows_the_layering():
    wrong = []
    for module, targets in sorted(_graph().items()):
        part = _part(module)
        assert part in ALLOWED, f"{module}: {part} has no place in the layering; add it"
        wrong += [f"{module} → {t}" for t in sorted(targets)
                  if _part(t) != part and _part(t) not in ALLOWED[part]]  # fmt: skip
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_schema_logic_imports_no_engine():
    # the JSON-Schema logic is pure: dict in, prepared schema out; engines answer its questions
    for path in (PACKAGE / "grammar" / "schema").glob("*.py"):
        text = path.read_text()
        for engine in ("llguidance", "outlines_core", "xgrammar", "hf_fvo.grammar.pushdown",
                       "hf_fvo.grammar.automaton", "hf_fvo.grammar.compiler"):  # fmt: skip
            assert f"import {engine}" not in text and f"from {engine}" not in text, path.name


def test_grammar_backends_depend_on_the_interface_only():
    graph = _graph()
    for backend in ("automaton", "pushdown"):
        for module, targets in graph.items():
            if module.startswith(f"hf_fvo.grammar.{backend}"):
                others = {t for t in targets if t.startswith("hf_fvo.grammar")
                          and not t.startswith(f"hf_fvo.grammar.{backend}")}  # fmt: skip
                # bitmask: the packed layout of the interface's admissible_words (a leaf)
                allowed = {"hf_fvo.grammar.interface", "hf_fvo.grammar.vocabulary",
                           "hf_fvo.grammar.trie", "hf_fvo.grammar.bitmask"}  # fmt: skip
                assert others <= allowed, (module, others)


def test_the_budget_rule_is_a_layer_over_the_pushdown_core():
    """hf_fvo.grammar.budget imports the interface and the pushdown core only; the compiler
    alone builds it (the core does not know it: the compiler attaches it), and no module outside
    the grammar layer imports a backend or the budget rule: they ask the Grammar interface."""
    graph = _graph()
    engines = ("hf_fvo.grammar.pushdown", "hf_fvo.grammar.automaton", "hf_fvo.grammar.budget")
    for module, targets in graph.items():
        if module.startswith("hf_fvo.grammar.budget"):
            own = ("hf_fvo.grammar.budget", "hf_fvo.grammar.pushdown")
            others = {t for t in targets
                      if t.startswith("hf_fvo.grammar") and not t.startswith(own)}  # fmt: skip
            assert others <= {"hf_fvo.grammar.interface"}, (module, others)
        elif not module.startswith("hf_fvo.grammar"):
            assert not {t for t in targets if t.startswith(engines)}, module
    builders = {m for m, targets in graph.items() if not m.startswith("hf_fvo.grammar.budget")
                and any(t.startswith("hf_fvo.grammar.budget") for t in targets)}  # fmt: skip
    assert builders == {"hf_fvo.grammar.compiler"}, builders


@pytest.mark.parametrize("bad", [{"a": {"b"}, "b": {"a"}}, {"a": {"b"}, "b": {"c"}, "c": {"a"}}])
def test_the_cycle_finder_finds_cycles(bad):
    assert _cycle(bad) is not None and _cycle({"a": {"b"}, "b": set()}) is None
