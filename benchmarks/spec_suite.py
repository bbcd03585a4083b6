"""The JSON Schema spec's own test cases, run through hf_fvo and its peers.

``build`` turns a checkout of https://github.com/json-schema-org/JSON-Schema-Test-Suite (MIT)
into ``tests/data/json_schema_test_suite.jsonl``: one row per schema of draft 2020-12 and draft 7
(the keyword files and ``optional/format``), in MaskBench's shape (``schema`` and ``tests`` with
``data``/``valid``), each schema given its draft's ``$schema`` where the file leaves it implicit.
``run`` measures them like ``benchmarks/maskbench.py`` does MaskBench (the same engines, side by
side, in one interleaved run): schemas compiled, valid instances accepted, invalid ones accepted.

    python benchmarks/spec_suite.py build --repo /path/to/JSON-Schema-Test-Suite
    python benchmarks/spec_suite.py run [--engines hf_fvo,xgrammar,llguidance,outlines_core]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "json_schema_test_suite.jsonl"
DRAFTS = {"draft2020-12": "https://json-schema.org/draft/2020-12/schema",
          "draft7": "http://json-schema.org/draft-07/schema#"}  # fmt: skip


def build(repo: Path) -> None:
    commit = subprocess.check_output(["git", "-C", str(repo), "rev-parse", "HEAD"], text=True)
    rows = []
    for draft, uri in DRAFTS.items():
        folder = repo / "tests" / draft
        formats = folder / "optional" / "format"
        files = sorted(folder.glob("*.json")) + sorted(formats.glob("*.json"))
        for path in files:
            for group in json.loads(path.read_text()):
                schema = group["schema"]
                if isinstance(schema, dict) and "$schema" not in schema:
                    schema = {"$schema": uri, **schema}
                name = str(path.relative_to(folder))
                rows.append({
                    "draft": draft, "file": name,
                    # format.json tests the spec's default (an annotation); optional/format/
                    # tests assertion, hf_fvo's default
                    "formats": "annotation" if name == "format.json" else "assert",
                    "description": f"{draft}/{name}: {group['description']}",
                    "schema": schema, "tests": [
                        {"description": t["description"], "data": t["data"], "valid": t["valid"]}
                        for t in group["tests"]
                    ],
                })  # fmt: skip
    with DATA.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(rows)} schemas from JSON-Schema-Test-Suite {commit.strip()} -> {DATA}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--repo", type=Path, required=True)
    sub.add_parser("run", help="the rest of the arguments go to benchmarks/maskbench.py")
    args, rest = parser.parse_known_args()
    if args.command == "build":
        build(args.repo)
        return
    sys.argv = ["maskbench.py", "--data", str(DATA), "--title", "JSON-Schema-Test-Suite",
                *rest]  # fmt: skip
    sys.path.insert(0, str(Path(__file__).parent))
    import maskbench

    maskbench.main()


if __name__ == "__main__":
    main()
