"""User code by `_target_`: importable from the launch folder, checked before a run opens, and
named truthfully.

    loss._target_=mylosses.pseudo_huber    a function or class in mylosses.py beside the command

`importable` puts the launch folder on the import path (as `python -m` does for the current
folder, and the `gradexp` script and in-process runs do not). `locate` imports a dotted path
(hydra.utils.get_object) and `instantiate` builds from a `_target_` (hydra.utils.instantiate),
turning every way the import can fail into one line naming the key and the path, so a typo ends
before an MLflow run exists. `label_by_target` sets a group's `name` to the user's `_target_`,
so MLflow params and `gradexp compare` do not call a run `loss=mse` that trained with
`mylosses.pseudo_huber` (or `optimizer=adam` one that trained with keras.optimizers.AdamW).
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from gradexp.config_checks import NO_OPTION, shipped_target
from gradexp.schema import ConfigError

# optimizer too (QA: optimizer._target_=keras.optimizers.AdamW on optimizer=adam was recorded
# as optimizer.name=adam); its `name` is the label only, never an argument (build_optimizer)
LABELLED_GROUPS = ("data", "model", "loss", "optimizer")
# The groups whose code the traced training, evaluation and check programs run.
TRACED_GROUPS = ("model", "loss", "optimizer", "eval")
# Code that cannot change while a process runs (a person's own can: `user_code_launch`).
LIBRARY_PACKAGES = frozenset({"gradexp", "keras", "tensorflow"})

# The launches (gradexp.run, gradexp.sweep, a test's run) this process has started. A person's
# code can change between two of them in one Python session, in ways no config shows: a builder
# redefined in a notebook cell, a module reloaded, a custom layer's class or a global it reads
# edited. What one job keeps for the next of its shape (traced programs, gradexp.shared_programs;
# the compile check's verdict, gradexp.setup_checks) is then kept within its launch only: a
# later launch that reused it judged and trained the earlier code (a planted wrong gradient
# passed, a weight cut from the loss went unnamed). Within a launch, a sweep, the code is one.
_launches = 0


def new_launch() -> None:
    """Start a launch: what was kept for a person's code is let go (never reused after this)."""
    global _launches
    _launches += 1
    from gradexp import model_files, setup_checks, shared_programs

    shared_programs.forget_user_code()
    setup_checks.forget_user_code()
    model_files.forget_user_code()


def user_code_launch(cfg: DictConfig, groups: tuple[str, ...] = TRACED_GROUPS) -> int | None:
    """None when every `_target_` under `groups` is gradexp's, Keras' or TensorFlow's own (code
    that is the same in every launch of a process); else this launch's number, so that keys
    built with it match within the launch only."""
    return None if packages_of(cfg, groups) <= LIBRARY_PACKAGES else _launches


def packages_of(cfg: DictConfig, groups: tuple[str, ...]) -> set[str]:
    """The top-level packages of every `_target_` under `groups` (layers written in YAML
    included)."""
    plain = [OmegaConf.to_container(cfg[group], resolve=True) for group in groups if group in cfg]
    return {target.split(".")[0] for target in targets_in(plain)}


@contextmanager
def launch_folders_put_back() -> Iterator[None]:
    """sys.path as it was, and the modules the block imported from its launch folders forgotten:
    a call of the Python API leaves none behind. The next call, from another folder with a
    my_models.py of its own, imports that one (it ran the first folder's, cached in
    sys.modules, as `python -m gradexp` from that folder never would); from the same folder, it
    imports the file as it is now (QA: a module edited on disk between two calls from a
    notebook, whose folder is on sys.path already, ran as first imported, and a wrong gradient
    passed its check). Modules the session imported before the block are its own: kept."""
    global _call_folders
    path, modules, outer = sys.path[:], set(sys.modules), _call_folders
    _call_folders = set()
    importlib.invalidate_caches()  # a module written since the last call is found
    try:
        yield
    finally:
        folders = _call_folders | {Path(entry).resolve() for entry in sys.path
                                   if entry and entry not in path}
        _call_folders = outer
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            file = getattr(sys.modules.get(name), "__file__", None)
            if file and any(_from_folder(name, file, folder) for folder in folders):
                del sys.modules[name]


_LAUNCH_FOLDERS: set[Path] = set()  # every folder a launch of this process put on sys.path
_call_folders: set[Path] = set()  # the launch folders of the running launch_folders_put_back


def _from_folder(name: str, file: str, folder: Path) -> bool:
    """Whether module `name`, loaded from `file`, is the one `folder` on sys.path gives:
    folder/top.py (or a compiled top.*) or a file of the package folder/top/, `top` being the
    name's first part. A module of a subfolder (folder/old/my_models.py, imported through
    another sys.path entry) or of a virtualenv inside the folder is not (QA: a my_models the
    session imported from a subfolder ran in place of the launch folder's). gradexp, Keras and
    TensorFlow never are: what they keep must outlive a call."""
    top = name.split(".")[0]
    if top in LIBRARY_PACKAGES:
        return False
    where = Path(file).resolve()
    return where.is_relative_to(folder / top) or (
        where.parent == folder and where.name.split(".")[0] == top)


def importable(launch_dir: Path) -> None:
    """Let `_target_`s name modules in the launch folder (first, as `python -m` has it); the
    modules imported from it are forgotten when the launch ends (launch_folders_put_back)."""
    folder = Path(launch_dir).resolve()
    _LAUNCH_FOLDERS.add(folder)
    _call_folders.add(folder)
    for entry in sys.path:
        if entry and Path(entry).resolve() == folder:
            return
    sys.path.insert(0, str(folder))


def locate(key: str, path: str) -> Any:
    """The object a dotted `path` names (hydra.utils.get_object); ConfigError `key=path: what is
    wrong` if there is none: no module, no attribute, or an error raised while importing."""
    from hydra.utils import get_object

    parts = str(path).split(".")
    if not path or not all(part.isidentifier() for part in parts):
        raise ConfigError(f"{key}={path}: not a dotted path such as mymodule.my_function")
    if len(parts) == 1:
        raise ConfigError(f"{key}={path}: name the module too, e.g. {key}=mymodule.{path}")
    before_importing(key, parts[0])  # a module of yours that loads TensorFlow says so
    hydra_log = logging.getLogger("hydra.utils")
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)  # get_object logs each miss: ours is the one line
    try:
        return get_object(str(path))
    except (ImportError, ValueError) as error:
        raise ConfigError(f"{key}={path}: {_why(parts, error.__cause__ or error)}") from None
    finally:
        hydra_log.setLevel(level)


def _why(parts: list[str], cause: BaseException) -> str:
    """What get_object's cause says went wrong, in a person's words."""
    if isinstance(cause, ModuleNotFoundError) and cause.name in (
            ".".join(parts[:depth]) for depth in range(1, len(parts) + 1)):
        missing = cause.name.split(".")
        if len(missing) == 1:
            return (f"no module named '{cause.name}' (looked in the launch folder and the "
                    "installed packages)")
        return f"module {'.'.join(missing[:-1])} has no attribute '{missing[-1]}'"
    if isinstance(cause, AttributeError) and cause.name in parts:
        where = ".".join(parts[:parts.index(cause.name)])
        return f"{where} has no attribute '{cause.name}'"
    # The import of one of the path's modules raised: the first that is not imported now.
    importing = next((".".join(parts[:depth]) for depth in range(1, len(parts) + 1)
                      if ".".join(parts[:depth]) not in sys.modules), parts[0])
    verb = "failed" if isinstance(cause, ImportError) else "raised"
    return f"importing {importing} {verb}{':' if verb == 'failed' else ''} {_one_line(cause)}"


def instantiate(key: str, spec: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate(spec, **kwargs), its `_target_` located first, so a wrong one
    is one line naming `key` (Hydra's own error is several, naming no key)."""
    from hydra.utils import instantiate as hydra_instantiate

    locate(key, str(spec["_target_"]))
    return hydra_instantiate(spec, **kwargs)


def check_modules_exist(cfg: DictConfig, launch_dir: Path,
                        groups: tuple[str, ...] = LABELLED_GROUPS) -> None:
    """Refuse a `_target_` whose top-level module exists neither in the launch folder nor among
    the installed packages, in locate's words, without importing anything (a module that
    imports TensorFlow takes seconds to load; a typo should answer in about one)."""
    import importlib.util

    importable(launch_dir)
    for group in groups:
        path = str(OmegaConf.select(cfg, f"{group}._target_", default="") or "")
        top = path.split(".")[0]
        if "." in path and top.isidentifier() and top not in sys.modules \
                and importlib.util.find_spec(top) is None:
            raise ConfigError(f"{group}._target_={path}: no module named '{top}' (looked in "
                              "the launch folder and the installed packages)")
        _not_shadowed(f"{group}._target_={path}", top, Path(launch_dir).resolve())


def _not_shadowed(key: str, top: str, folder: Path) -> None:
    """A module imported from elsewhere would run instead of the launch folder's own of that
    name (Python reuses sys.modules), where `python -m gradexp` there runs the folder's (a
    notebook's my_models.py and another project's ran mixed up). One an earlier launch imported
    from its own folder is forgotten, as a new process would not have it; one the session
    imported itself is its own, and refused in one line."""
    module = sys.modules.get(top)
    file = getattr(module, "__file__", None)
    own = folder / f"{top}.py" if (folder / f"{top}.py").is_file() else folder / top
    if file is None or not own.exists() or _from_folder(top, file, folder):
        return
    if any(_from_folder(top, file, earlier) for earlier in _LAUNCH_FOLDERS):
        for name in [name for name in sys.modules if name == top or name.startswith(f"{top}.")]:
            del sys.modules[name]
        return
    raise ConfigError(f"{key}: {top} is already imported in this session from "
                      f"{Path(file).parent}, and Python would run that one, not the launch "
                      f"folder's {own.name} (which `python -m gradexp` there runs): "
                      f"del sys.modules['{top}'] first, or launch from {Path(file).parent}")


def targets_in(node: Any) -> list[str]:
    """Every `_target_` in a plain container (OmegaConf.to_container), nested ones included
    (the layers of model=keras), outermost first."""
    if isinstance(node, dict):
        found = [str(node["_target_"])] if "_target_" in node else []
        return found + [t for value in node.values() for t in targets_in(value)]
    if isinstance(node, list):
        return [t for value in node for t in targets_in(value)]
    return []


def _one_line(error: BaseException) -> str:
    """`Type: first line of the message (file:line)`, the innermost frame being the user's code."""
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
    frames = traceback.extract_tb(error.__traceback__)
    if frames and not isinstance(error, SyntaxError):  # a SyntaxError names its line itself
        text += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    return text[:300]


def label_by_target(cfg: DictConfig, groups: tuple[str, ...] = LABELLED_GROUPS) -> DictConfig:
    """Set `<group>.name` to `<group>._target_` where the person replaced the option's target.

    The rule: load the chosen option's own file (conf/<group>/<name>.yaml); if the composed
    `_target_` differs from the file's, the option's name no longer describes the run, and the
    target's dotted path does. A name that is no option's file is the person's own: kept.
    Idempotent (a labelled name is no option's file), so callers need not coordinate.
    """
    for group in groups:
        shipped = shipped_target(cfg, group)
        if shipped is None or shipped is NO_OPTION:
            continue
        node = OmegaConf.select(cfg, group)
        if node["_target_"] != shipped:
            node.name = str(node["_target_"])
    return cfg


def with_autograph(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` called as code inside a `tf.function` calls it: user code converted by
    autograph (a Python `if` on a tensor becomes a cond), Keras' own code left as it is, and an
    error raised while tracing it reported as tf.function reports it (a StagingError naming
    the user's file and line, not autograph's generated code). Eagerly, `function` itself.

    The trainer's compiled loop is written without autograph (converting it cost ~0.4 s of every
    run); the losses and metrics it calls go through this instead, so they behave as before.
    """
    import tensorflow as tf

    if type(function).__module__.split(".")[0] in ("keras", "tensorflow"):
        return function  # autograph never converts Keras' code: spare the conversion (~40 ms)

    def call(*args: Any) -> Any:
        return function(*args)

    converted: list[Callable[..., Any]] = []  # converted at the first trace, once

    def traced(*args: Any) -> Any:
        if tf.executing_eagerly():
            return function(*args)
        if not converted:
            converted.append(tf.autograph.to_graph(call))
        try:
            return converted[0](*args)
        except Exception as error:
            metadata = getattr(error, "ag_error_metadata", None)
            if metadata is None:
                raise
            # as tf.function's own autograph handler does (the message keeps the cause)
            raise metadata.to_exception(error) from None

    return traced


# A person's module that imports TensorFlow or Keras at its top level (from its source)
TENSORFLOW_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tensorflow|keras|tf_keras)\b",
                               re.MULTILINE)


def before_importing(key: str, module_name: str) -> None:
    """A person's module that imports TensorFlow takes seconds to load the first time: say what
    is loading, in one line, and load TensorFlow first, quietly (gradexp.tensorflow_import), so
    its start-up chatter does not follow the line."""
    if "tensorflow" in sys.modules or not loads_tensorflow(module_name):
        return
    from gradexp.console import note_line
    from gradexp.tensorflow_import import import_tensorflow

    note_line(f"importing {module_name} ({key}), which loads TensorFlow: a few seconds")
    import_tensorflow()


def loads_tensorflow(module_name: str) -> bool:
    """Whether a top-level module of the person's (a .py file, not yet imported) imports
    TensorFlow or Keras, from its source: nothing is imported to know."""
    import importlib.util

    if module_name in sys.modules or "." in module_name:
        return False
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return False
    origin = getattr(spec, "origin", None) or ""
    if not origin.endswith(".py") or "site-packages" in origin or "dist-packages" in origin:
        return False  # an installed package, an extension, a built-in: not the person's file
    try:
        return bool(TENSORFLOW_IMPORT.search(Path(origin).read_text(errors="replace")))
    except OSError:
        return False


def raised_by_own_code(error: BaseException) -> bool:
    """Whether `error` came from a `raise` statement in a person's own code (a model builder's
    check of its arguments), not from Keras or TensorFlow (a layer that does not take the data's
    shape). Keras drops its own frames from a traceback it re-raises, so the innermost frame
    left is the person's: only a `raise` there is theirs."""
    import linecache

    last = error.__traceback__
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    if last is None:
        return False
    filename = last.tb_frame.f_code.co_filename
    if any(part in filename for part in ("/keras/", "/tensorflow/", "/site-packages/")):
        return False
    return linecache.getline(filename, last.tb_lineno).lstrip().startswith("raise")
