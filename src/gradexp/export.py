"""The model a run logs, built for the person who will call it on the raw features they have:

    raw features ─> Normalization (the training rows' mean and variance, in float64 as
    gradexp.data standardized them; a second, inverted one where a column's std is below
    Keras' epsilon, 1e-7, which Normalization divides by at the least) ─> the trained network,
    as trained ─> softmax (sigmoid for one output) for a classification, so predict() gives
    class probabilities as a Keras classifier does

The trained network is not copied or changed: the served model calls it as a layer, so it holds
the network's current weights (after early stopping's restore_best, the restored ones: the run
logs its model after restoring). `export` also finds the classes of yours the network's config
names (your layers, by module) and the files of their modules, which the tracker bundles with
the model (gradexp.mlflow_store, gradexp.serving loads them), so the model loads where your
module is not importable. Plain values out; MLflow is the tracker's (gradexp.mlflow_store).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradexp.data import Dataset, Standardization

# Packages whose classes Keras finds by itself (or that are installed, not yours to bundle).
KERAS_PACKAGES = {"keras", "tensorflow", "tf_keras"}


@dataclass
class Export:
    """The served network and what is recorded with it."""

    network: Any  # keras.Model: raw features in, probabilities (or predicted values) out
    task: str
    n_features: int
    n_outputs: int
    features: list[str] | None = None  # the signature's column names, when the data has names
    integer_features: list[str] = field(default_factory=list)  # int64 columns (a csv's)
    boolean_features: list[str] = field(default_factory=list)  # bool columns
    labels: list | None = None  # a classification: the label of each output column
    standardized: bool = False
    scores: bool = False  # a classification trained by a regression loss: no softmax, scores
    custom_objects: dict[str, list[str]] = field(default_factory=dict)  # name -> [module, attr]
    code_paths: list[Path] = field(default_factory=list)  # your modules' files, bundled
    raw_dtype: str = "float32"  # unnamed features: the dtype the signature takes
    raw_shape: tuple[int, ...] | None = None  # and a row's shape there; None: (n_features,)

    @property
    def metadata(self) -> dict[str, Any]:
        """The model's MLflow metadata (mlflow.models.get_model_info(uri).metadata): task,
        labels, outputs, standardized."""
        values = {"task": self.task, "standardized": self.standardized,
                  "outputs": "values" if self.task != "classification"
                  else "scores" if self.scores else "probabilities"}
        if self.labels is not None:  # the features' names are the signature's
            values["labels"] = self.labels
        return values


def export(network, data: Dataset, outputs: str = "logits",
           independent_outputs: bool = False) -> Export:
    """The served model of `network` trained on `data`. `outputs` (gradexp.losses.outputs_of:
    "logits", "probabilities" or "scores") says what the network gives for a classification:
    logits get the softmax or sigmoid, probabilities and a regression loss's scores nothing.
    `independent_outputs` (a binary crossentropy: each column its own yes/no, as it trained
    them, several labels per row allowed) takes a sigmoid per column, not a softmax across."""
    classification = data.task == "classification"
    activation = None
    if classification and outputs == "logits":
        independent = data.n_outputs == 1 or independent_outputs
        activation = "sigmoid" if independent else "softmax"
    _check_scales(data.standardization, data.features)
    served = served_network(network, data.n_features, data.standardization, activation)
    labels = None
    if classification:  # one output: its probability is that of labels[1]
        labels = data.labels or list(range(max(data.n_outputs, 2)))
    from gradexp.models import compile_state_set_aside

    with compile_state_set_aside(served):  # what loading it needs: not your compile() loss
        custom, code = user_code(served)
    return Export(served, data.task, data.n_features, data.n_outputs, data.features,
                  data.integer_features or [], data.boolean_features or [], labels,
                  data.standardization is not None, classification and outputs == "scores",
                  custom, code, data.raw_dtype or "float32", data.raw_shape)


def served_network(network, n_features: int, standardization: Standardization | None,
                   activation: str | None):
    """A functional keras.Model: Normalization (when the features were standardized), then
    `network` called as a layer, then `activation`."""
    import keras

    if standardization is None:
        inputs = keras.Input((n_features,), name="features")
        x = inputs
    else:
        # In float64, as gradexp.data standardized the training rows: a float32 input or
        # mean rounds a Unix timestamp (~1.7e9) to 128 s, more than such a column's spread.
        # The network (float32) casts the standardized values, as training did.
        inputs = keras.Input((n_features,), name="features", dtype="float64")
        x = inputs
        for layer in _standardize(standardization, n_features):
            x = layer(x)
    outputs = network(x)
    if activation == "softmax":
        outputs = keras.layers.Softmax(name="probabilities")(outputs)
    elif activation is not None:
        outputs = keras.layers.Activation(activation, name="probabilities")(outputs)
    return keras.Model(inputs, outputs, name="served")


def _standardize(standardization: Standardization, n_features: int) -> list:
    """The layers that compute (x - mean) / scale as gradexp.data did: a float64 Normalization
    `standardize`, and only where some column's scale is below keras.config.epsilon() a second.

    Normalization divides by max(sqrt(variance), epsilon), so a column spread less than epsilon
    (1e-7: a capacitance in farads, std ~1e-9; a column constant in the file, whose float64 std
    is ~1e-16, not 0) would be divided by epsilon, not by its scale as it was in training. Such a
    column is divided by 1 in `standardize` and multiplied by 1 / scale in an inverted
    Normalization `standardize_small_scales` (mean 0, every other column's factor 1): x ·
    max(sqrt(variance), epsilon), with sqrt(variance) = 1 / scale > 1, so the two together
    divide by the true scale whatever epsilon below 1 the serving environment sets. Keras' own
    layers, in float64: it loads with plain Keras, and a timestamp keeps its digits."""
    import keras
    import numpy as np

    scale = np.asarray(standardization.scale, dtype=np.float64)
    small = scale < keras.config.epsilon()
    variance = np.where(small, 1.0, scale) ** 2 if small.any() else standardization.scale ** 2
    layers = [_normalization("standardize", standardization.mean, variance, n_features)]
    if small.any():
        factor = np.where(small, 1.0 / np.where(small, scale, 1.0), 1.0)
        layers.append(_normalization("standardize_small_scales", np.zeros(n_features),
                                     factor ** 2, n_features, invert=True))
    return layers


def _normalization(name: str, mean, variance, n_features: int, invert: bool = False):
    """A float64 Normalization holding the mean and variance as its weights: given to its
    constructor they would be saved in its config as Python floats, which Keras reads back as
    float32 when the model loads."""
    import keras

    layer = keras.layers.Normalization(dtype="float64", name=name, invert=invert)
    layer.build((None, n_features))
    layer.adapt_mean.assign(mean)
    layer.adapt_variance.assign(variance)
    layer.finalize_state()
    return layer


def _check_scales(standardization: Standardization | None, features: list[str] | None) -> None:
    """Refuse, in one line naming the column, a scale the served model cannot divide by: not a
    positive number (a loader's own Standardization), or so small (below ~1e-154) that
    1 / scale² is no float64 (_standardize)."""
    import numpy as np

    if standardization is None:
        return
    scale = np.asarray(standardization.scale, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        bad = ~(scale > 0) | ~np.isfinite((1.0 / scale) ** 2)  # NaN, 0, negative: a loader's
    for column in np.flatnonzero(bad)[:1]:
        name = repr(features[column]) if features else f"column {column}"
        what = "too small to divide by (below ~1e-154)" if scale[column] > 0 else \
            "not a positive number"
        raise ValueError(f"feature {name}: its standardization's std {scale[column]:.3g} is "
                         f"{what}; rescale or drop the column")


def user_code(network) -> tuple[dict[str, list[str]], list[Path]]:
    """What loading `network` needs beyond Keras: {registered name: [module, attribute]} of
    every class or function its config names from another package, and the files of those
    modules that are yours (not installed packages, not gradexp): a module's .py file, or a
    package's whole folder."""
    import keras

    custom: dict[str, list[str]] = {}
    for entry in _named_objects(keras.saving.serialize_keras_object(network)):
        module = entry["module"]
        if module.split(".")[0] in KERAS_PACKAGES:
            continue
        function = entry["class_name"] == "function"
        attribute = entry["config"] if function else entry["class_name"]
        custom[entry.get("registered_name") or attribute] = [module, attribute]
    paths: list[Path] = []
    for module, _ in custom.values():
        path = _own_source(module)
        if path is not None and path not in paths:
            paths.append(path)
    return custom, paths


def _named_objects(node: Any):
    """Every {"module": ..., "class_name": ...} entry of a serialized Keras config."""
    if isinstance(node, dict):
        if isinstance(node.get("module"), str) and "class_name" in node:
            yield node
        for value in node.values():
            yield from _named_objects(value)
    elif isinstance(node, list):
        for value in node:
            yield from _named_objects(value)


def _own_source(module: str) -> Path | None:
    """The file (or package folder) to bundle for `module`: the person's own code only."""
    top = module.split(".")[0]
    loaded = sys.modules.get(top)
    file = getattr(loaded, "__file__", None)
    if top in ("__main__", "gradexp") or file is None:
        return None  # a notebook's class cannot be bundled; gradexp's need gradexp installed
    path = Path(file).resolve()
    if {"site-packages", "dist-packages"} & set(path.parts):
        return None  # an installed package: the environment provides it
    return path.parent if path.name == "__init__.py" else path
