"""Tag keys in one place (gradexp/tag_keys.py): no module spells a `gradexp.*` tag key itself."""

from __future__ import annotations

import ast
from pathlib import Path

import gradexp
from gradexp import tag_keys

PACKAGE = Path(gradexp.__file__).resolve().parent
# `gradexp.` strings that are no tag keys: the objective's resolver, module paths, the API's name.
NOT_TAGS = {"gradexp.direction", "gradexp.", "gradexp.sweep(...)"}
RESOLVER_OR_MODULE = ("metrics.py", "setup_checks.py", "api.py", "run_params.py", "seeds.py",
                      "resume.py")


def spelled_tag_keys() -> dict[str, set[str]]:
    """Every `gradexp.*` string literal in the package outside tag_keys.py, by file."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = str(path.relative_to(PACKAGE))
        if name == "tag_keys.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and node.value.startswith("gradexp.") and " " not in node.value \
                    and not (node.value in NOT_TAGS and name in RESOLVER_OR_MODULE):
                found.setdefault(name, set()).add(node.value)
    return found


def test_no_module_spells_a_tag_key_itself():
    assert spelled_tag_keys() == {}


def test_each_key_is_defined_once():
    keys = [value for name, value in vars(tag_keys).items() if name.isupper()]
    assert len(keys) == len(set(keys))
    assert tag_keys.PARENT_TAG == "mlflow.parentRunId"
