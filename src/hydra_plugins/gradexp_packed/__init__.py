"""gradexp's packed launcher for Hydra (`hydra/launcher=packed`): the jobs of one shape trained
together in one compiled program (gradexp.packed), each still recorded as its own child run.

Hydra finds launchers only inside the `hydra_plugins` namespace package, hence this folder."""
