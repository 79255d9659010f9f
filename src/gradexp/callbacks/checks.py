"""Gradient checks during a run: at the start, every gradcheck.every_n_epochs and at the end;
each recorded (metrics, json report, heat maps where they help), a failure warned about or, with
gradcheck.on_fail=fail, ending the run FAILED."""

from __future__ import annotations

from omegaconf import DictConfig

from gradexp import console
from gradexp.callbacks.base import Callback
from gradexp.endings import GradientCheckFailed


class GradientChecks(Callback):
    def __init__(self, cfg: DictConfig):
        gc, epochs = cfg.gradcheck, cfg.trainer.epochs
        self.epochs = set(range(gc.every_n_epochs, epochs, gc.every_n_epochs)) \
            if gc.every_n_epochs else set()
        if gc.at_start:
            self.epochs.add(0)
        if gc.at_end:
            self.epochs.add(epochs)

    def stops(self, epochs: int) -> set[int]:
        return {epoch for epoch in self.epochs if epoch > 0}

    def on_train_begin(self, run) -> None:
        if 0 in self.epochs and run.trainer.epoch == 0:
            self.check(run, 0)

    def on_stretch_end(self, run, stretch) -> None:
        if run.trainer.epoch in self.epochs and run.trainer.epoch > 0:
            self.check(run, run.trainer.epoch)

    def check(self, run, epoch: int) -> None:
        from gradexp.verification import (
            EAGER_CHECKS,
            check_training_gradients,
            disconnected_variables,
        )

        result = check_training_gradients(run.cfg.gradcheck, run.model, run.cfg.loss,
                                          run.data, epoch,
                                          eager=len(self.epochs) <= EAGER_CHECKS)
        if not run.checks:  # asked at the first check only: said once
            result.disconnected = disconnected_variables(run.cfg.gradcheck, run.model,
                                                         run.cfg.loss, run.data)
        run.checks.append(result)
        if result.disconnected:
            names = ", ".join(result.disconnected)
            run.tracker.set_tags({"gradexp.gradcheck.disconnected": names})
            if not run.quiet:
                console.console().print(f"[yellow]warning:[/yellow] no gradient reaches {names}"
                                        " (not connected to the loss)", highlight=False)
        if result.notes and len(run.checks) == 1:  # e.g. user code that only runs in float32
            run.tracker.set_tags({"gradexp.gradcheck_dtype": result.dtype})
            if not run.quiet:
                console.console().print(f"[yellow]warning:[/yellow] {result.notes[0]}",
                                        highlight=False)
        for key, value in result.metrics().items():
            run.tracker.log_metric(key, value, epoch)
        run.tracker.log_dict(result.to_dict(), f"gradcheck/report_epoch_{epoch:05d}.json")
        # Heat maps where they help: after training, and whenever a check fails.
        if run.cfg.gradcheck.plots and (epoch == run.cfg.trainer.epochs or not result.passed):
            self.log_heatmaps(run, result)
        if not result.passed:
            lines = "; ".join(result.failures())
            run.tracker.set_tags({"gradexp.gradcheck": "failed"})
            message = f"gradient check failed at epoch {epoch}: {lines}"
            if run.cfg.gradcheck.on_fail == "fail":
                run.tracker.set_tags({"gradexp.failure": "gradcheck",
                                      "gradexp.failure_epoch": epoch})
                raise GradientCheckFailed(message)
            if not run.quiet:
                console.console().print(f"[yellow]warning:[/yellow] {message}")

    @staticmethod
    def log_heatmaps(run, result) -> None:
        from gradexp.plots import jacobian_heatmaps
        from gradexp.verification import heatmaps

        for name, maps in heatmaps(result).items():
            safe = name.replace("/", "_")
            figure = jacobian_heatmaps(name, maps.analytical, maps.numerical, worst=maps.worst,
                                       shape=maps.shape)  # a failure's worst element outlined
            run.tracker.log_figure(figure,
                                   f"gradcheck/heatmap_{safe}_epoch_{result.epoch:05d}.png")
