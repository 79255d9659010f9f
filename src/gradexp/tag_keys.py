"""Every MLflow tag key gradexp writes or reads, in one place.

A tag key is part of what a run records (the UI's columns, `gradexp compare`, a person's own
search_runs filters), so it is named once here and imported where it is written and read; a
typo in a module then fails at import, not as a tag nobody finds. No imports: every module may
import this one.
"""

from __future__ import annotations

# MLflow's own: a child run's parent (the UI nests children under it).
PARENT_TAG = "mlflow.parentRunId"

# ---------------------------------------------------------------- every run
OBJECTIVE_TAG = "gradexp.objective"  # the metric a sweep ranks by (val/mse, val/accuracy, ...)
DIRECTION_TAG = "gradexp.direction"  # minimize | maximize, the objective's
TASK_TAG = "gradexp.task"  # regression | classification
REPLICAS_TAG = "gradexp.replicas"  # devices the run trained on
RESTART_OF_TAG = "gradexp.restart_of"  # the KILLED run a restart continues
RESUMED_FROM_EPOCH_TAG = "gradexp.resumed_from_epoch"
# trainer.epochs of the run's last resume: its param keeps the first run's (MLflow params
# cannot change); config.yaml has it too
RESUMED_TO_EPOCH_TAG = "gradexp.resumed_to_epoch"
STOPPED_EARLY_TAG = "gradexp.stopped_early"  # why early stopping stopped the run
MODEL_LOGGED_TAG = "gradexp.model_logged"  # "false" when tracking.log_model is off
CHECKPOINTS_TAG = "gradexp.checkpoints"  # the run's checkpoint folder
FAILURE_TAG = "gradexp.failure"  # diverged | gradcheck
FAILURE_EPOCH_TAG = "gradexp.failure_epoch"
REASON_TAG = "gradexp.status_reason"  # why a run ended as it did, one line

# Liveness (gradexp.liveness): who runs a RUNNING run, and when it last said so.
HOST_TAG = "gradexp.host"
PID_TAG = "gradexp.pid"
HEARTBEAT_TAG = "gradexp.heartbeat"

# The gradient checks (gradexp.callbacks.checks).
GRADCHECK_TAG = "gradexp.gradcheck"  # "failed" once a check failed; "unchecked": none could be
CULPRITS_TAG = "gradexp.gradcheck.culprits"  # the layers a failed check points at
DISCONNECTED_TAG = "gradexp.gradcheck.disconnected"  # variables the loss does not reach
GRADCHECK_DTYPE_TAG = "gradexp.gradcheck_dtype"
# the mode the checks ran in, set where it is not gradcheck.mode (randomness Keras' seeds do
# not hold: inference)
GRADCHECK_MODE_TAG = "gradexp.gradcheck_mode"

# The data (gradexp.data.data_tags).
DATA_ROWS_PREFIX = "gradexp.data.rows."  # + split name: rows in that split
DATA_STANDARDIZED_TAG = "gradexp.data.standardized"
DATA_STREAMED_TAG = "gradexp.data.streamed"
DATA_SAMPLE_ROWS_TAG = "gradexp.data.sample_rows"
DATA_BATCHED_BY_TAG = "gradexp.data.batched_by"
DATA_BATCH_SIZE_TAG = "gradexp.data.batch_size"
DATA_CLASSES_TAG = "gradexp.data.classes"
DATASET_SOURCE_TAG = "gradexp.data"  # on a logged dataset's source, not on the run

# ---------------------------------------------------------------- a sweep's parent
SWEEP_TAG = "gradexp.sweep"  # "true" on a sweep's parent run
SWEPT_TAG = "gradexp.swept"  # the swept keys, joined by commas
SWEEPER_TAG = "gradexp.sweeper"  # BasicSweeper, OptunaSweeper, ...
LAUNCHER_TAG = "gradexp.launcher"  # BasicLauncher, JoblibLauncher, ...
BEST_RUN_ID_TAG = "gradexp.best_run_id"
BEST_RUN_NAME_TAG = "gradexp.best_run_name"
BEST_IN_SWEEP_TAG = "gradexp.best_in_sweep"  # "true" on the best child
BEST_GROUP_TAG = "gradexp.best_group"  # key=value,... of the best group of replicates
REUSED_TAG = "gradexp.reused."  # + job number: the FINISHED run a job reused
OPTUNA_BEST_TRIAL_TAG = "gradexp.optuna.best_trial"
# on each child run of an Optuna sweep: its trial's number in the study (best_trial names one)
OPTUNA_TRIAL_TAG = "gradexp.optuna.trial"
OPTUNA_STUDY_TAG = "gradexp.optuna.study"
OPTUNA_STORAGE_TAG = "gradexp.optuna.storage"
PRUNED_TAG = "gradexp.pruned_at_epoch"  # on a pruned child run: the last epoch it trained
# on a packed child run whose training diverged or oscillated: why its records may drift
# from those of the same job run sequentially (float arithmetic in another order)
PACKED_DRIFT_TAG = "gradexp.packed_drift"
