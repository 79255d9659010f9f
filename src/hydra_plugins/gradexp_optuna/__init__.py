"""gradexp's Optuna sweeper for Hydra (`hydra/sweeper=optuna`), on a current Optuna.

Hydra finds sweepers only inside the `hydra_plugins` namespace package, hence this folder beside
src/gradexp. hydra-optuna-sweeper, which it replaces, caps Optuna below 3 and tells Optuna every
trial COMPLETE; this one keeps its config keys and search-space syntax."""
