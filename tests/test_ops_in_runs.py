"""A person's model computing TensorFlow ops that the checks or training meet at their edges
(QA): an op whose gradient kernel exists in float32 only, and an op with no gradient at all."""

from __future__ import annotations

import pytest

import conftest
from conftest import user_modules
from gradexp.endings import NoGradient

RESIZING = '''
import keras
import tensorflow as tf


class Resize(keras.layers.Layer):
    def __init__(self, method="bilinear", antialias=False, **kwargs):
        super().__init__(**kwargs)
        self.method, self.antialias = method, antialias

    def call(self, x):
        return tf.image.resize(x, [3, 3], method=self.method, antialias=self.antialias)

    def get_config(self):
        return {**super().get_config(), "method": self.method, "antialias": self.antialias}


def build(n_features, n_outputs, method="bilinear", antialias=True):
    inputs = keras.Input((n_features,))
    h = keras.layers.Reshape((2, 2, 1))(keras.layers.Dense(4, activation="tanh")(inputs))
    h = keras.layers.Flatten()(Resize(method, antialias, name="resize")(h))
    return keras.Model(inputs, keras.layers.Dense(n_outputs)(h))
'''

MODEL = ("model=custom", "model._target_=resizing.build", "trainer.epochs=3",
         "tracking.log_model=false")


@pytest.fixture
def launch(tmp_path, monkeypatch):
    with user_modules(tmp_path, monkeypatch, resizing=RESIZING) as folder:
        yield folder


@pytest.mark.heavy  # ~4 s
def test_an_op_with_a_float32_only_gradient_is_checked_in_float32(store, client, launch,
                                                                  capsys):
    """tf.image.resize(antialias=True) has no float64 gradient kernel: the run, which trains
    in float32, ended in a 37-frame traceback at its first check. Now checked in float32."""
    result = conftest.run(store, *MODEL, launch_dir=launch, quiet=False)
    out = capsys.readouterr()
    said = " ".join((out.out + out.err).split())  # rich wraps the warning at the width
    assert "gradcheck.dtype=float64 requested, but the model cannot run in float64 " \
           "(InvalidArgumentError: cannot compute ScaleAndTranslateGrad" in said
    assert "checked in float32, the dtype it trains in" in said
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["gradexp.gradcheck_dtype"] == "float32"
    assert run.data.tags.get("gradexp.gradcheck") not in ("failed", "unchecked")


def test_an_op_without_a_gradient_fails_the_run_in_one_line(store, client, launch):
    """tf.image.resize(method="area") has no gradient: a 35-frame traceback from the first
    check (or training step, with gradcheck=off). Now one line, and the run's reason."""
    for checks in ("gradcheck=default", "gradcheck=off"):
        with pytest.raises(NoGradient) as failed:
            conftest.run(store, *MODEL, checks, "+model.kwargs.method=area",
                         "+model.kwargs.antialias=false", launch_dir=launch)
        line = str(failed.value)
        assert line.startswith("model._target_=resizing.build: TensorFlow has no gradient for "
                               "the op ResizeArea")
        assert line.endswith("it computes, so it cannot train; compute that step with ops "
                             "that have one, or give it one (tf.custom_gradient, "
                             "tf.RegisterGradient)")
        assert failed.value.exit_code == 2
        (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()],
                                    order_by=["start_time DESC"], max_results=1)
        assert run.info.status == "FAILED"
        assert run.data.tags["gradexp.status_reason"] == line
