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
    assert ("| `epochs` | int | `100` | must be an integer >= 1 and <= 2147483647 | passes over "
            "the data (seed 004: 100) |") in page
    assert "| `method` | auto \\| jacobian \\| probe \\| both | `jacobian` |" in page


def _commented(key: str, text: str) -> bool:
    """`key` is commented in an option's YAML: set with a comment on its line, or named at the
    start of a comment line (`# key   what it does`)."""
    import re

    return bool(re.search(rf"^{re.escape(key)}:.*#", text, re.M)
                or re.search(rf"^#\s+{re.escape(key)}\b", text, re.M))


def test_every_key_of_every_option_is_commented_in_its_yaml_or_the_one_it_points_to():
    """The README's promise: each option's YAML comments its keys in place. A variant (gradcheck=
    jacobian, tracking=none) may point to the file that does: `... conf/GROUP/OPTION.yaml ...`
    on a comment line saying 'other key'."""
    import re
    from dataclasses import fields

    from omegaconf import OmegaConf

    from conftest import option_schema

    uncommented = []
    for group in load_generator().GROUPS:
        for path in sorted((REPO / "conf" / group).glob("*.yaml")):
            text = path.read_text()
            pointer = re.search(r"^#.*other keys?.*\((conf/\w+/\w+\.yaml)", text, re.M)
            others = (REPO / pointer.group(1)).read_text() if pointer else ""
            schema = OmegaConf.get_type(option_schema(group, path.stem))
            uncommented += [f"{group}={path.stem}: {item.name}" for item in fields(schema)
                            if item.name not in ("name", "_target_")
                            and not _commented(item.name, text)
                            and not _commented(item.name, others)]
    root = (REPO / "conf" / "config.yaml").read_text()
    from gradexp.schema import Config, EvalConfig, SweepConfig

    uncommented += [f"config.yaml: {block}.{item.name}" for block, schema in
                    (("eval", EvalConfig), ("sweep", SweepConfig)) for item in fields(schema)
                    if not re.search(rf"^#\s+{item.name}\b", root, re.M)]
    uncommented += [f"config.yaml: {item.name}" for item in fields(Config)
                    if item.name == "seed" and not re.search(r"^# seed\b", root, re.M)]
    assert not uncommented, uncommented
