"""Ctrl-C and SIGTERM land between training stretches, never inside one (gradexp.interrupts):
a signal raised into TensorFlow's or a checkpoint's Python code once ended a run in a segfault."""

from __future__ import annotations

import os
import signal

import pytest

from conftest import run
from gradexp.endings import Terminated
from gradexp.interrupts import interrupts_deferred, sigterm_as_interrupt

SELF_TERMINATING = '''
import os
import signal


class TermAt:
    """Sends this process SIGTERM at the first stretch end at or past `epoch`."""

    def __init__(self, epoch):
        self.epoch = epoch
        self.sent_at = None

    def stops(self, epochs):
        return {self.epoch}

    def on_stretch_end(self, run, stretch, logs):
        if self.sent_at is None and run.trainer.epoch >= self.epoch:
            self.sent_at = run.trainer.epoch
            os.kill(os.getpid(), signal.SIGTERM)
            logs["mine/after_signal"] = float(self.sent_at)  # still runs: the signal waits

    def on_train_end(self, run, status):
        run.set_tags({"mine.sent_at": self.sent_at})
'''


def test_a_signal_in_a_deferred_block_lands_when_the_block_ends():
    reached = []
    with sigterm_as_interrupt(), pytest.raises(Terminated):
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            reached.append("after the signal")
    assert reached == ["after the signal"]


def test_an_ignored_ctrl_c_stays_ignored_through_a_deferred_block():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under `nohup ... &`
    try:
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_during_a_stretch_ends_the_run_killed_after_that_stretch(store, client,
                                                                         tmp_path):
    (tmp_path / "term_at.py").write_text(SELF_TERMINATING)
    with pytest.raises(Terminated):
        run(store, "trainer.epochs=40", "trainer.checkpoint_every=0", "gradcheck=off",
            "tracking.log_model=false", "+callbacks.term._target_=term_at.TermAt",
            "+callbacks.term.epoch=10", launch_dir=tmp_path)
    (killed,) = client.search_runs([client.get_experiment_by_name("gradexp").experiment_id])
    assert killed.info.status == "KILLED"
    sent_at = int(killed.data.tags["mine.sent_at"])
    # The callback's own line after the signal ran, the recorder (after it) recorded the
    # stretch, and no further stretch was trained.
    assert [m.value for m in client.get_metric_history(killed.info.run_id,
                                                       "mine/after_signal")] == [sent_at]
    loss = client.get_metric_history(killed.info.run_id, "loss")
    assert max(m.step for m in loss) == sent_at >= 10
