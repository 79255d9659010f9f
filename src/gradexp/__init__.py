"""gradexp: declarative gradient experiments: Hydra configs, TensorFlow training, gradient checks,
MLflow tracking. Run `python -m gradexp --help`, or from Python:

    import gradexp
    result = gradexp.run("optimizer=adam", "loss=mae")      # a RunResult: run_id, metrics, ...
    results = gradexp.sweep("optimizer=sgd,adam")          # one RunResult per job

`gradexp.run`, `gradexp.sweep` and `gradexp.GradexpError` load on first use (gradexp.api), so
`import gradexp` (and `from gradexp.gradcheck import ...`) stays light: no Hydra, no TensorFlow.
"""

__version__ = "0.1.0"
__all__ = ["GradexpError", "run", "sweep"]


def __getattr__(name: str):
    if name in __all__:
        from gradexp import api

        return getattr(api, name)
    raise AttributeError(f"module 'gradexp' has no attribute {name!r}")
