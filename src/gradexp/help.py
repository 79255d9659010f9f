"""`python -m gradexp --help`, answered from the config files themselves.

Hydra's own --help builds a config repository for every group it knows (ours, its own, and the
schema/* type-check groups: about 150) and took about 3 s here. This lists the same choices from
conf/ and experiments/ and prints the composed config, in about half a second.
"""

from __future__ import annotations

from omegaconf import OmegaConf

from gradexp.resources import resource_dir


def print_help(overrides: list[str]) -> None:
    """The header, every group's options, the config the overrides compose, the footer."""
    from hydra import compose, initialize_config_dir

    conf = resource_dir("conf")
    text = OmegaConf.load(conf / "config.yaml").hydra.help
    groups = {folder.name: sorted(path.stem for path in folder.glob("*.yaml"))
              for folder in conf.iterdir() if folder.is_dir() and folder.name != "hydra"}
    groups["experiment"] = sorted(path.stem for path in resource_dir("experiments").glob("*.yaml"))
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    print(text.header)
    print("== Configuration groups ==")
    print("Compose your configuration from those groups (group=option)\n")
    for group in sorted(groups):
        print(f"{group}: {', '.join(groups[group])}")
    print("\n\n== Config ==")
    print("Override anything in the config (foo.bar=value)\n")
    print(OmegaConf.to_yaml(cfg))
    print(text.footer)


# What a run's results depend on, by distribution name as pip knows it
_RUNS_ON = (("Hydra", "hydra-core"), ("TensorFlow", "tensorflow"), ("Keras", "keras"),
            ("MLflow", "mlflow"))


def version_line() -> str:
    """`python -m gradexp --version`: gradexp's version and those it runs on, read from the
    installed packages' metadata (no import: it answers at once). Hydra's own --version printed
    only Hydra's (QA)."""
    from importlib.metadata import PackageNotFoundError, version

    from gradexp import __version__

    def installed(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    return f"gradexp {__version__} (" + ", ".join(
        f"{name} {installed(package)}" for name, package in _RUNS_ON) + ")"
