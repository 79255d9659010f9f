"""The console while training: a progress bar, and about ten seed-style lines a run (loss,
grad_norm, W, b and the latest validation metrics)."""

from __future__ import annotations

from omegaconf import DictConfig

from gradexp import console
from gradexp.callbacks.base import Callback
from gradexp.callbacks.evaluation import print_every


class Progress(Callback):
    def __init__(self, cfg: DictConfig):
        self.every = print_every(cfg)
        self.bar = None

    def on_train_begin(self, run) -> None:
        self.bar = console.progress(run.cfg.trainer.epochs, completed=run.trainer.epoch)
        self.bar.start()

    def on_stretch_end(self, run, stretch) -> None:
        epoch, epochs = run.trainer.epoch, run.cfg.trainer.epochs
        latest = {**{key: values[-1] for key, values in stretch.values.items()}, **stretch.latest}
        self.bar.update(self.bar.task_ids[0], completed=epoch, loss=f"{latest['loss']:.6g}")
        if epoch % self.every == 0 or epoch == epochs or run.stop_training:
            held_out = {key: values[-1][1] for key, values in run.evaluations.items()
                        if key.startswith("val/") and values[-1][0] == epoch}
            shown = "  ".join(f"{key} {value:.6g}" for key, value in {**latest, **held_out}.items())
            self.bar.console.print(f"epoch {epoch:>{len(str(epochs))}}/{epochs}  {shown}",
                                   highlight=False)

    def on_train_end(self, run, status: str) -> None:
        if self.bar is not None:
            self.bar.stop()
