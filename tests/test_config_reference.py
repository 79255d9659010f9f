"""docs/config.md is generated from the schemas; it must say what the schemas say."""

from __future__ import annotations

import importlib.util

from conftest import REPO


def load_generator():
    spec = importlib.util.spec_from_file_location(
        "make_config_reference", REPO / "docs" / "make_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_config_reference_is_in_sync_with_the_schemas():
    generator = load_generator()
    assert (REPO / "docs" / "config.md").read_text() == generator.reference(), (
        "docs/config.md is out of date: run python docs/make_config_reference.py")


def test_the_reference_lists_every_option_and_a_key_with_its_default_range_and_doc():
    page = (REPO / "docs" / "config.md").read_text()
    for group in load_generator().GROUPS:
        for option in (REPO / "conf" / group).glob("*.yaml"):
            assert f"### `{group}={option.stem}`" in page
    # A key's default with the rule's words beside its doc; an option's own value.
    assert ("| `epochs` | int | `100` | must be an integer >= 1 | passes over the data "
            "(seed 004: 100) |") in page
    assert "| `method` | auto \\| jacobian \\| probe \\| both | `jacobian` |" in page
