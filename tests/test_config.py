"""Config composition: every group option composes and names itself; wrong input is refused
before TensorFlow loads, naming the key and what is accepted."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from conftest import CONF, compose_config, option_schema
from gradexp.config_checks import check_ranges
from gradexp.schema import ConfigError

GROUPS = ["data", "model", "loss", "optimizer", "device", "trainer", "gradcheck", "tracking"]
OPTIONS = [(group, path.stem) for group in GROUPS for path in sorted((CONF / group).glob("*.yaml"))]


def test_every_group_has_its_documented_options():
    names = {group: {o for g, o in OPTIONS if g == group} for group in GROUPS}
    assert names["data"] == {"linear", "sine", "blobs", "csv", "sklearn", "custom"}
    assert names["model"] >= {"linear", "mlp", "buggy_linear"}
    assert names["loss"] == {"mse", "mae", "huber", "log_cosh", "binary_crossentropy",
                             "categorical_crossentropy"}
    assert names["optimizer"] == {"sgd", "momentum", "adam", "adamw", "rmsprop", "adagrad",
                                  "nadam"}
    assert names["device"] == {"auto", "cpu", "gpu", "mirrored"}
    assert names["gradcheck"] >= {"off", "default"}
    assert names["tracking"] == {"mlflow", "none"}


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_every_option_composes_and_sets_name(group, option):
    extra = {("data", "csv"): ["data.path=x.csv", "data.target=y"],
             ("data", "custom"): ["data._target_=my_data.load"],
             ("model", "custom"): ["model._target_=my_models.build"]}.get((group, option), [])
    cfg = compose_config(f"{group}={option}", *extra)
    name = cfg[group].name
    # data=sklearn names the data set it loads (data.name=digits); every other option itself
    expected = "diabetes" if (group, option) == ("data", "sklearn") else option
    assert name == expected and f"{name}" == expected  # StrEnum: its text as read
    check_ranges(cfg)
    # the schema the tables here and in test_every_key.py are built from, without a compose
    assert OmegaConf.get_type(cfg[group]) is OmegaConf.get_type(option_schema(group, option))


def test_defaults_are_seed_004():
    cfg = compose_config()
    assert (cfg.data.name, cfg.model.name, cfg.loss.name, cfg.optimizer.name) == (
        "linear", "linear", "mse", "sgd")
    assert cfg.optimizer.learning_rate == 0.1
    assert cfg.trainer.epochs == 100 and cfg.trainer.batch_size is None
    assert (cfg.data.slope, cfg.data.intercept, cfg.data.noise, cfg.data.n_samples) == (
        3.0, 4.0, 0.1, 100)
    assert cfg.tracking.uri is None and cfg.tracking.experiment == "gradexp"
    for node in ("eval", "sweep"):  # as option_schema() gives them to the tables
        assert OmegaConf.get_type(cfg[node]) is OmegaConf.get_type(option_schema()[node])


def test_every_optimizer_has_a_learning_rate_that_can_be_overridden():
    for _, option in [o for o in OPTIONS if o[0] == "optimizer"]:
        cfg = compose_config(f"optimizer={option}", "optimizer.learning_rate=0.005")
        assert cfg.optimizer.learning_rate == 0.005


@pytest.mark.parametrize(("override", "key"), [
    ("optimizer.learning_rate=abc", "optimizer.learning_rate"),
    ("trainer.epochs=1.5", "trainer.epochs"),
    ("model.activation=banana", "model.activation"),
    ("device=tpu", "device"),
])
def test_wrong_types_and_options_fail_at_composition_naming_the_key(override, key):
    extra = ["model=mlp"] if override.startswith("model.") else []
    with pytest.raises(ConfigCompositionException) as failure:
        compose_config(*extra, override)
    text = str(failure.value) + str(failure.value.__cause__)
    assert key in text


def test_unknown_key_is_refused():
    with pytest.raises(ConfigCompositionException, match="trainer.epoch"):
        compose_config("trainer.epoch=5")


@pytest.mark.parametrize(("override", "message"), [
    ("trainer.epochs=0", "trainer.epochs=0: must be an integer >= 1 and <= 2147483647"),
    # the id left out: a fresh run started, silently
    ("trainer.resume=", "trainer.resume=: must be an MLflow run id (not empty), or null to start "
                        "a new run"),
    ("optimizer.learning_rate=-1", "optimizer.learning_rate=-1.0: must be a number > 0"),
    ("trainer.batch_size=0", "trainer.batch_size=0: must be an integer >= 1 and <= 2147483647"),
    ("data.noise=-0.5", "data.noise=-0.5: must be a number >= 0"),
    ("gradcheck.probes=0", "gradcheck.probes=0: must be an integer >= 1 and <= 2147483647"),
])
def test_out_of_range_values_name_key_value_and_range(override, message):
    with pytest.raises(ConfigError) as failure:
        check_ranges(compose_config(override))
    assert str(failure.value).startswith(message)


def test_mlp_widths_are_checked():
    with pytest.raises(ConfigError, match=r"model.hidden=\[8, 0\]: must be a list of integers"):
        check_ranges(compose_config("model=mlp", "model.hidden=[8,0]"))


def test_composed_config_round_trips_to_yaml():
    cfg = compose_config("optimizer=adam", "loss=huber")
    text = OmegaConf.to_yaml(cfg)
    assert "_target_: keras.optimizers.Adam" in text and "delta: 1.0" in text


# ---------------------------------------------------------------- one source per key
def _all_schemas() -> list[type]:
    from gradexp.schema import SCHEMAS, EvalConfig, SweepConfig

    return [s for options in SCHEMAS.values() for s in options.values()] + [EvalConfig,
                                                                              SweepConfig]


def test_every_key_has_its_doc_type_default_and_range_on_its_schema_field():
    from gradexp.schema import TrainerConfig, describe

    for schema in _all_schemas():
        for row in describe(schema):
            assert row.doc, f"{schema.__name__}.{row.key} has no doc"
    rows = {row.key: row for row in describe(TrainerConfig)}
    assert rows["epochs"].default == 100 and rows["epochs"].type is int
    assert rows["epochs"].accepted == "must be an integer >= 1 and <= 2147483647"
    assert rows["early_stopping.patience"].default == 10  # nested blocks as dotted keys


def test_no_option_file_restates_a_schema_default():
    """Each default is written once, in the schema: an option file sets its name, its _target_
    and what differs (optimizer=rmsprop's learning_rate 0.01), nothing else."""
    from gradexp.schema import SCHEMAS, describe

    restated = []
    for group, option in OPTIONS:
        text = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"))
        (entry,) = [e for e in text.pop("defaults") if str(e).startswith("/schema/")]
        schema = SCHEMAS[group][entry.split("@")[0].rsplit("/", 1)[-1]]
        defaults = {row.key: row.default for row in describe(schema)}
        flat = OmegaConf.to_container(OmegaConf.create(text))
        for key, value in flat.items():
            if isinstance(value, dict):
                restated += [f"{group}/{option}: {key}.{k}" for k, v in value.items()
                             if defaults.get(f"{key}.{k}", "???") == v]
            elif key in defaults and defaults[key] == value and value != "???":
                restated.append(f"{group}/{option}: {key}")
    assert restated == []


EXTRA = {("data", "csv"): ["data.path=x.csv", "data.target=y"],
         ("data", "custom"): ["data._target_=my_data.load"],
         ("model", "custom"): ["model._target_=my_models.build"]}


def _rule_cases() -> list[tuple[tuple[str, ...], str, str, str]]:
    """(options chosen, key, a value its rule refuses, the expected line) for every field that
    has a rule, found through each option's composed config: nothing here lists a rule."""
    import typing
    from dataclasses import fields, is_dataclass

    from omegaconf import DictConfig

    cases, seen = [], set()

    def walk(chosen: tuple[str, ...], prefix: str, node: DictConfig) -> None:
        schema = OmegaConf.get_type(node)
        hints = typing.get_type_hints(schema)
        for item in fields(schema):
            key, rule = f"{prefix}.{item.name}", item.metadata.get("rule")
            inner = node.get(item.name)
            if isinstance(inner, DictConfig) and is_dataclass(OmegaConf.get_type(inner)):
                walk(chosen, key, inner)
            if rule is None or key in seen:
                continue
            kind = [a for a in typing.get_args(hints[item.name]) if a is not type(None)] or [
                hints[item.name]]
            kind = kind[0] if typing.get_origin(hints[item.name]) is not list else list
            kind = list if typing.get_origin(kind) is list else kind  # list[str] | None
            candidates = {int: [-1, 0, 1, 3], float: [-1.0, 0.0, 1.0], str: [""],
                          list: [[0], []]}[kind]
            bad = next(value for value in candidates if not rule.test(value))
            shown = f"[{','.join(map(str, bad))}]" if kind is list else bad
            cases.append((chosen, key, shown, f"{key}={shown}: {rule.accepted}"))
            seen.add(key)

    for group, option in [*OPTIONS, (None, None)]:
        chosen = (f"{group}={option}", *EXTRA.get((group, option), [])) if group else ()
        cfg = option_schema(group, option)  # the node compose gives it (checked below)
        for prefix in ([group] if group else ["eval", "sweep"]):
            walk(chosen, prefix, cfg if group else cfg[prefix])
    return cases


RULE_CASES = _rule_cases()


def test_the_rules_cover_the_keys_with_a_range():
    keys = {key for _, key, _, _ in RULE_CASES}
    assert {"trainer.epochs", "optimizer.learning_rate", "optimizer.schedule.alpha",
            "trainer.early_stopping.patience", "data.n_classes", "model.hidden", "eval.every",
            "tracking.experiment", "gradcheck.order", "loss.delta"} <= keys
    assert len(keys) >= 39  # validation.py's table had 39, and seeds were a separate walk


@pytest.mark.parametrize(("chosen", "key", "value", "line"), RULE_CASES,
                         ids=[f"{k}={v}" for _, k, v, _ in RULE_CASES])
def test_every_range_rule_refuses_in_its_own_words(chosen, key, value, line):
    with pytest.raises(ConfigError) as refused:
        check_ranges(compose_config(*chosen, f"{key}={value!r}" if value == "" else
                                    f"{key}={value}"))
    assert str(refused.value) == line
