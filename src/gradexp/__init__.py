"""gradexp: declarative gradient experiments: Hydra configs, TensorFlow training, gradient checks,
MLflow tracking. Run `python -m gradexp --help`."""

__version__ = "0.1.0"
