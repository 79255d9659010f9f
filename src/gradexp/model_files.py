"""The files of a run's logged model: the MLflow model folder (MLmodel, the Keras model, the
pyfunc loader, the environment files) written locally, which gradexp.mlflow_store then uploads
as the LoggedModel's artifacts. No MLflow client here: the store module writes the records."""

from __future__ import annotations

import contextlib
import json
import warnings
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def _no_requirement_check() -> Iterator[None]:
    """Skip MLflow's check that this environment satisfies the model's pip requirements while a
    model is saved: the requirements are read from this very environment (the installed
    tensorflow, keras, mlflow), so it cannot fail, and it scans every installed distribution
    (importlib.metadata.packages_distributions) the first time: ~0.5-1 s a run. Nothing written
    changes. An MLflow without the function is left alone."""
    try:
        from mlflow.utils import environment
    except ImportError:
        yield
        return
    original = getattr(environment, "warn_dependency_requirement_mismatches", None)
    if original is None:
        yield
        return
    environment.warn_dependency_requirement_mismatches = lambda requirements: None
    try:
        yield
    finally:
        environment.warn_dependency_requirement_mismatches = original


def model_signature(served):
    """Raw features in, by column name where the data has names (a csv's header, scikit-learn's
    feature names: predict takes a DataFrame; integer columns (a csv's, as pandas.read_csv
    reads them; a loader DataFrame's or tf.data dict's) are int64, true/false ones boolean:
    MLflow refuses either for a double column), else one tensor of n_features columns in the
    dtype your loader gave them (float32 for gradexp's own data) and the shape of its rows (a
    1-D x: one value a row; images: (-1, 8, 8, 1)), which predict flattens as training did;
    one float32 output per class (probabilities) or per target."""
    import numpy as np
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema, TensorSpec

    if served.features is not None:
        inputs = Schema([ColSpec("long" if name in served.integer_features else
                                 "boolean" if name in served.boolean_features else "double", name)
                         for name in served.features])
    else:
        row = served.raw_shape if served.raw_shape is not None else (served.n_features,)
        inputs = Schema([TensorSpec(np.dtype(served.raw_dtype), (-1, *row))])
    outputs = Schema([TensorSpec(np.dtype("float32"), (-1, served.n_outputs))])
    return ModelSignature(inputs, outputs)


def save_network(served, folder: Path) -> Path:
    """The part of the model folder that reads the network's weights: the Keras file and what
    loads it (features, labels, custom objects), under folder/keras. Returns that folder."""
    from gradexp import serving
    from gradexp.models import compile_state_set_aside

    data = folder / "keras"  # becomes the model's data/keras
    data.mkdir()
    with compile_state_set_aside(served.network):  # predict needs no compile() of yours
        served.network.save(data / serving.MODEL_FILE)
    (data / serving.SPEC_FILE).write_text(json.dumps(
        {"custom_objects": served.custom_objects, "features": served.features,
         "labels": served.labels}), encoding="utf-8")
    return data


# The saved networks that loaded back in this launch (one command line, one gradexp.run or
# gradexp.sweep call), by what decides whether one loads: its Keras config (the architecture)
# and its serving spec (custom objects, features, labels). A person's code may change between
# two launches of one process, even in the same module object (importlib.reload, a notebook
# cell redefining a class: QA), so a new launch forgets them all (forget_user_code).
_LOADED: set[tuple[bytes, bytes]] = set()
MAX_LOADED = 256  # architectures remembered (a few KiB each)


def forget_user_code() -> None:
    """A new launch: no network's load is taken as known (gradexp.user_code.new_launch)."""
    _LOADED.clear()


def check_loads(data: Path) -> None:
    """Load the saved network back as `mlflow.pyfunc.load_model` will (gradexp.serving), so that
    a model nobody could load is said at once, not logged (a layer whose get_config leaves out
    an argument of its __init__ saves, then fails to load). ~10-40 ms for a small model.

    Whether a network loads is a matter of its architecture and its classes' code, not of its
    weights' values: a sweep's later job whose saved config and spec are those of a network
    that loaded in this launch is not loaded again (~20 ms a job of seed 004's line)."""
    import zipfile

    from gradexp import serving
    from gradexp.endings import plain

    with zipfile.ZipFile(data / serving.MODEL_FILE) as saved:
        architecture = (saved.read("config.json"), (data / serving.SPEC_FILE).read_bytes())
    if architecture in _LOADED:
        return
    try:
        serving.load_network(str(data))
    except Exception as error:  # noqa: BLE001 - any failure to load is the point
        # Keras nests the cause: "... could not be deserialized ... Exception encountered: ..."
        # plain: Keras' bold escapes reached the warning and the MLflow tag as "[1m" (QA)
        why = " ".join(plain(str(error)).rsplit("Exception encountered:", 1)[-1].split())[:300]
        raise RuntimeError(f"it would not load back: {type(error).__name__}: {why}") from error
    if len(_LOADED) >= MAX_LOADED:  # a long-lived process (a notebook's many runs): start over
        _LOADED.clear()
    _LOADED.add(architecture)


def save_served_model(served, folder: Path, logged, run_id: str, data: Path | None = None
                      ) -> Path:
    """Write the MLflow model folder of `served` (gradexp.export.Export) under `folder`, as the
    LoggedModel `logged`; returns the model folder. `data`: what save_network wrote earlier
    (the rest reads no weights, so it may run after the network has moved on)."""
    import shutil

    import keras
    import mlflow.pyfunc
    import tensorflow as tf
    from mlflow.models import Model

    from gradexp import serving

    data = data if data is not None else save_network(served, folder)
    loader = folder / "gradexp_serving.py"  # the pyfunc loader, shipped as code/ (no gradexp)
    shutil.copyfile(serving.__file__, loader)
    mlflow_model = Model(artifact_path=logged.artifact_location, model_uuid=logged.model_id,
                         run_id=run_id, model_id=logged.model_id, metadata=served.metadata)
    mlflow_model.add_flavor("keras", data="data/keras", keras_version=keras.__version__,
                            keras_backend=keras.backend.backend(), save_exported_model=False)
    saved = folder / "model"
    requirements = [f"tensorflow=={tf.__version__}", f"keras=={keras.__version__}"]
    with _no_requirement_check(), warnings.catch_warnings():
        # "An input example was not provided": the signature is given, an example would be
        # a copy of someone's data in every model.
        warnings.simplefilter("ignore", UserWarning)
        mlflow.pyfunc.save_model(str(saved), loader_module="gradexp_serving",
                                 data_path=str(data),
                                 code_paths=[str(loader), *map(str, served.code_paths)],
                                 mlflow_model=mlflow_model, signature=model_signature(served),
                                 pip_requirements=requirements)
    return saved
