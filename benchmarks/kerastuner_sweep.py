"""KerasTuner's GridSearch over the sweep bench_packed.py runs, for its side-by-side table.

    python benchmarks/kerastuner_sweep.py line --seeds 4          # 4 optimizers x 4 rates x 4
    python benchmarks/kerastuner_sweep.py digits --epochs 30      # 4 optimizers x 4 rates
    python benchmarks/kerastuner_sweep.py line --trials 8         # the first 8 trials only

What a Keras user would write instead of gradexp: a `build(hp)` that picks the optimizer, the
learning rate and the seed, and `tuner.search` calling `model.fit` on the same arrays gradexp
trains on (gradexp's own data loader, composed from its conf/ with the same overrides: seed 004's
line, or scikit-learn's digits split 80/20), the same model (a Dense layer; or the MLP with 64
relu units), the same loss, epochs and batch size, and the validation split as validation_data.
No gradient check and no MLflow: KerasTuner's own trial files in a temp folder.

Prints one JSON line: the trials run, the search's wall seconds (after TensorFlow's import, which
the process start line of bench_packed.py includes), and the best trial's val_loss. Needs
KerasTuner and TensorBoard, which it imports (`pip install ".[bench]"`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

OPTIMIZERS = ("sgd", "momentum", "adagrad", "adam")  # as conf/optimizer/*.yaml builds them
RATES = {"line": (0.01, 0.03, 0.1, 0.3), "digits": (0.001, 0.003, 0.01, 0.03)}
OVERRIDES = {"line": [], "digits": ["data=sklearn", "data.name=digits", "model=mlp",
                                    "model.hidden=[64]", "loss=categorical_crossentropy",
                                    "trainer.batch_size=32"]}


def gradexp_data(problem: str):
    """The arrays gradexp trains and validates on for `problem`, and its batch size."""
    from hydra import compose, initialize_config_dir

    from gradexp.app import register_configs, resource_dir
    from gradexp.data import load_data

    register_configs()  # the schemas, presets and resolver, as the command line has them
    with initialize_config_dir(config_dir=str(resource_dir("conf")), version_base="1.3"):
        cfg = compose(config_name="config", overrides=OVERRIDES[problem])
    data = load_data(cfg.data)
    return data, data.splits()["val"], int(cfg.trainer.batch_size or len(data.x))


def optimizer(keras, name: str, rate: float):
    return {"sgd": lambda: keras.optimizers.SGD(rate),
            "momentum": lambda: keras.optimizers.SGD(rate, momentum=0.9),
            "adagrad": lambda: keras.optimizers.Adagrad(rate),
            "adam": lambda: keras.optimizers.Adam(rate)}[name]()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", choices=("line", "digits"))
    parser.add_argument("--seeds", type=int, default=1, help="seeds per configuration")
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--trials", type=int, default=None, help="stop after this many trials")
    options = parser.parse_args()

    import keras
    import keras_tuner

    train, val, batch_size = gradexp_data(options.problem)
    classification = options.problem == "digits"

    def build(hp):
        keras.utils.set_random_seed(hp.Choice("seed", list(range(options.seeds))))
        layers = [keras.Input((train.x.shape[1],))]
        if classification:
            layers.append(keras.layers.Dense(64, activation="relu"))
        layers.append(keras.layers.Dense(train.y.shape[1] if train.y.ndim == 2 else 1))
        model = keras.Sequential(layers)
        loss = (keras.losses.CategoricalCrossentropy(from_logits=True) if classification
                else keras.losses.MeanSquaredError())
        model.compile(optimizer(keras, hp.Choice("optimizer", list(OPTIMIZERS)),
                                hp.Choice("learning_rate", list(RATES[options.problem]))),
                      loss=loss)
        return model

    grid = len(OPTIMIZERS) * len(RATES[options.problem]) * options.seeds
    trials = min(grid, options.trials or grid)
    with tempfile.TemporaryDirectory() as folder:
        tuner = keras_tuner.GridSearch(build, objective="val_loss", max_trials=trials,
                                       directory=folder, project_name="bench", overwrite=True)
        started = time.perf_counter()
        tuner.search(train.x, train.y, validation_data=(val.x, val.y), epochs=options.epochs,
                     batch_size=batch_size, verbose=0)
        seconds = time.perf_counter() - started
        states = [str(trial.status) for trial in tuner.oracle.trials.values()]
        if len(states) != trials or any(state != "COMPLETED" for state in states):
            # KerasTuner logs a failed trial and goes on; a timing of failures means nothing
            raise SystemExit(f"KerasTuner's trials did not all complete: {states}")
        best = tuner.oracle.get_best_trials(1)[0].score
    print(json.dumps({"trials": trials, "grid": grid, "seconds": seconds, "best_val_loss": best}))


if __name__ == "__main__":
    main()
