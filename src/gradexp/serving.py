"""The loader of a model gradexp logged, shipped inside it: MLflow copies this file into the
model's `code/` folder as `gradexp_serving.py` and calls its `_load_pyfunc` from
`mlflow.pyfunc.load_model`, so the model loads where gradexp is not installed. It imports only
what every Keras model needs (keras, numpy, pandas), never gradexp.

The model folder holds `data/keras/model.keras` (the served network: standardization, the trained
network, softmax or sigmoid; gradexp.export) and `data/keras/serving.json`: the classes the
network's config names that Keras cannot find by itself (your layers, by module and name; their
modules are bundled in `code/` beside this file) and the labels of the outputs.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import Any

SPEC_FILE = "serving.json"
MODEL_FILE = "model.keras"
ROWS_PER_CALL = 8192  # rows per forward pass: bounds the memory a large predict() takes


def custom_objects(spec: dict[str, list[str]]) -> dict[str, Any]:
    """{registered name: the class or function}, imported from the bundled code (importing a
    module also registers what it decorates with keras.saving.register_keras_serializable)."""
    found = {}
    for registered, (module, attribute) in spec.items():
        found[registered] = getattr(importlib.import_module(module), attribute)
    return found


def load_network(folder: str):
    """The served Keras model saved in `folder` (data/keras of a logged model)."""
    import keras

    with open(os.path.join(folder, SPEC_FILE), encoding="utf-8") as handle:
        spec = json.load(handle)
    network = keras.saving.load_model(os.path.join(folder, MODEL_FILE),
                                      custom_objects=custom_objects(spec["custom_objects"]),
                                      compile=False,
                                      # a Lambda layer's Python code: no more than the bundled
                                      # modules this loader imports anyway
                                      safe_mode=False)
    return network, spec


def _load_pyfunc(path: str) -> ServedModel:
    """Called by mlflow.pyfunc.load_model with the model's data folder."""
    network, spec = load_network(path)
    return ServedModel(network, spec.get("features"), spec.get("labels"))


class ServedModel:
    """predict(rows) -> one row of outputs per input row, as Keras' predict gives them: class
    probabilities for a classification (columns in the order of the labels), predicted values
    for a regression. A DataFrame in gives a DataFrame out (a classification's columns named by
    its labels); an array gives an array."""

    def __init__(self, network, features: list[str] | None, labels: list | None):
        self.network = network
        self.features = features
        self.labels = labels

    def get_raw_model(self):
        """The Keras model (PyFuncModel.get_raw_model())."""
        return self.network

    def predict(self, data, params: dict | None = None):
        import numpy as np
        import pandas as pd

        if isinstance(data, pd.DataFrame):
            columns = self.features if self.features is not None else list(data.columns)
            outputs = self._outputs(data[columns].to_numpy(dtype=self._input_dtype()))
            names = self.labels if self.labels and len(self.labels) == outputs.shape[1] else None
            if self.labels and len(self.labels) == 2 and outputs.shape[1] == 1:
                names = self.labels[1:]  # a yes/no label: the probability of its second class
            return pd.DataFrame(outputs, index=data.index, columns=names)
        rows = np.asarray(data, dtype=self._input_dtype())
        # Rows as the loader gave them (a 1-D x, images) train flattened: predict does the same.
        return self._outputs(rows.reshape(len(rows), -1) if rows.ndim != 2 else rows)

    def _input_dtype(self) -> str:
        """float64 when the model standardizes (gradexp.export): the raw rows reach its
        Normalization with every digit they have (a float32 cast first rounds a timestamp to
        128 s); float32 for a model without it, or one logged before."""
        return str(getattr(self.network.inputs[0], "dtype", "float32"))

    def _outputs(self, x):
        import keras
        import numpy as np

        parts = [keras.ops.convert_to_numpy(self.network(x[start:start + ROWS_PER_CALL],
                                                         training=False))
                 for start in range(0, len(x), ROWS_PER_CALL)]
        return np.concatenate(parts) if parts else np.zeros((0, self.network.output_shape[-1]),
                                                            dtype=np.float32)
