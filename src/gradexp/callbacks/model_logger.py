"""The trained model, as served (gradexp.export: raw features in, probabilities out), handed to
the recorder as the run's LoggedModel `model`, with the weights the run reports (after
restore_best); tracking.log_model=false skips it. A model Keras cannot save (a custom layer
without get_config, say) is said in one warning; the run still finishes."""

from __future__ import annotations

from gradexp import console
from gradexp.callbacks.base import Callback
from gradexp.run_view import RunView
from gradexp.tag_keys import MODEL_LOGGED_TAG


class ModelLogger(Callback):
    def on_train_end(self, run: RunView, status: str) -> None:
        from gradexp.export import export
        from gradexp.losses import independent_outputs, outputs_of

        if status != "FINISHED" or not run.cfg.tracking.log_model or run.run_id is None:
            return  # tracking=none: nowhere to log it

        def not_logged(error: BaseException) -> None:
            run.set_tags({MODEL_LOGGED_TAG: "false"})
            if not run.quiet:
                console.console().print(f"[yellow]warning:[/yellow] the trained model was not "
                                        f"logged ({console.reason(error)}); "
                                        "tracking.log_model=false skips it")

        try:
            served = export(run.model.network, run.data,
                            outputs=outputs_of(run.cfg.loss, run.model.ends_in_probabilities()),
                            independent_outputs=independent_outputs(run.cfg.loss))
        except Exception as error:  # noqa: BLE001 - the run's results stand without the file
            not_logged(error)
            return
        run.log_model(served, run.epoch, not_logged)
