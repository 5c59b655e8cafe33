"""compile/choice's candidate lists do not depend on import order: choice.PROVIDERS names exactly the modules
that register candidates, and candidates() loads them (checked in a fresh interpreter, which imports nothing else)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _registering_modules() -> set[str]:
    found = set()
    for path in (ROOT / "edge_sdk").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "register_candidates"
                    and not (path.name == "__init__.py" and path.parent.name == "choice")):
                found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def test_providers_list_every_module_that_registers_candidates():
    from edge_sdk.compiler import choice

    assert set(choice.PROVIDERS) == _registering_modules()


def test_candidates_in_a_fresh_interpreter_include_every_family():
    code = ("import json; from edge_sdk.compiler import choice; "
            "w = {'x': [1, 28, 28, 64], 'w': [3, 3, 64, 64], 'stride': [1, 1], 'dilation': [1, 1], 'out_hw': [28, 28]}; "
            "print(json.dumps([choice.family_names(), choice.candidates('int8.gemm8', w)]))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    families, names = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"float.gemm", "float.conv", "float.dw", "int8.gemm8"} <= set(families)
    assert "winograd_f23" in names and any(n.startswith("winograd_f23/g") for n in names)
