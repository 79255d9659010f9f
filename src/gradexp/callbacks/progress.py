"""The console while training: a progress bar, and about ten seed-style lines a run (loss,
grad_norm, W, b and the latest validation metrics)."""

from __future__ import annotations

from gradexp import console
from gradexp.callbacks.base import Callback
from gradexp.callbacks.divergence import kept_part
from gradexp.callbacks.held_out import print_every
from gradexp.run_view import RunView


class Progress(Callback):
    """Off in a quiet run."""

    def __init__(self) -> None:
        self.every = 1
        self.bar = None

    def on_train_begin(self, run: RunView) -> None:
        if run.quiet:
            return
        self.every = print_every(run.cfg)
        self.bar = console.progress(run.cfg.trainer.epochs, completed=run.epoch)
        self.bar.start()

    def on_stretch_end(self, run: RunView, stretch, logs) -> None:
        if self.bar is None:
            return
        # the lines of the epochs before a NaN epoch too (divergence, later, ends the run)
        stretch = kept_part(stretch)
        if not len(stretch.epochs):
            return
        epochs = run.cfg.trainer.epochs
        last = stretch.last_epoch
        self.bar.update(self.bar.task_ids[0], completed=last,
                        loss=f"{stretch.values['loss'][-1]:.6g}")
        for epoch in stretch.epochs:  # the lines of the epochs inside the stretch, from its arrays
            epoch = int(epoch)
            if epoch % self.every == 0 or epoch == epochs or (run.stop_training and epoch == last):
                held_out = {key: value for key, value in stretch.evaluations.get(epoch, {}).items()
                            if key.startswith("val/")}
                shown = "  ".join(f"{key} {value:.6g}"
                                  for key, value in {**stretch.at(epoch), **held_out}.items())
                self.bar.console.print(f"epoch {epoch:>{len(str(epochs))}}/{epochs}  {shown}",
                                       highlight=False)

    def on_train_end(self, run: RunView, status: str) -> None:
        if self.bar is not None:
            self.bar.stop()
