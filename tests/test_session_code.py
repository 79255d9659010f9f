"""gradexp.run called again and again from one Python session (a notebook, a script beside its
modules): each call runs the person's code as it is on disk now, refuses a module of the same
name the session imported from elsewhere, and starts an unseeded builder from other weights,
as a new `python -m gradexp` would (gradexp/user_code.py, gradexp/api.py)."""

from __future__ import annotations

import random
import sys

import pytest

import gradexp
from conftest import FIXED_LINE, shadowed_line, user_modules

LINE = FIXED_LINE
UNSEEDED = '''
import keras

def build(n_features, n_outputs):  # Keras' default initializers: unseeded
    x = keras.Input((n_features,))
    return keras.Model(x, keras.layers.Dense(n_outputs)(keras.layers.Dense(8)(x)))
'''
FROZEN = ("model=custom", "gradcheck=off", "trainer.epochs=1", "tracking.log_model=false",
          "optimizer.learning_rate=1e-9")


@pytest.mark.heavy  # ~2 s
def test_a_module_edited_on_disk_between_two_calls_from_its_folder_is_the_edited_one(
        tmp_path, store, monkeypatch):
    # The folder was on sys.path already (a script's own folder, a notebook's ''), so the call
    # kept the module it imported, and the next call trained the old file: a wrong gradient
    # planted in the edit passed its check, where a new command line failed it (QA)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # two edits within one second
    finals, left = [], []
    with user_modules(tmp_path, monkeypatch, fixed_line=LINE.format(w=0.0, b=0.0)):
        sys.path.insert(0, str(tmp_path))
        for w, b in ((0.0, 0.0), (3.0, 4.0)):
            (tmp_path / "fixed_line.py").write_text(LINE.format(w=w, b=b))
            finals.append(gradexp.run(f"tracking.uri={store}", "model._target_=fixed_line.build",
                                      *FROZEN, launch_dir=tmp_path).final_loss)
            left.append("fixed_line" in sys.modules)
        # One the session imported itself is its own: used, and still there after the call.
        import fixed_line

        kept = gradexp.run(f"tracking.uri={store}", "model._target_=fixed_line.build", *FROZEN,
                           launch_dir=tmp_path).final_loss
        assert sys.modules["fixed_line"] is fixed_line
    assert finals[0] > 20 and finals[1] < 0.05 and kept == finals[1], finals
    assert left == [False, False]  # the call's own import is forgotten after it


def test_a_module_the_session_imported_from_a_subfolder_is_refused(tmp_path, store, monkeypatch):
    # my_models imported from the launch folder's old/ ran in place of the launch folder's own
    # my_models.py, silently, where one from any other folder is refused (QA)
    old = tmp_path / "old"
    old.mkdir()
    with user_modules(tmp_path, monkeypatch, my_models=LINE.format(w=3.0, b=4.0)):
        (old / "my_models.py").write_text(LINE.format(w=0.0, b=0.0))
        sys.path.insert(0, str(old))
        import my_models  # noqa: F401
        sys.path.remove(str(old))
        with pytest.raises(gradexp.GradexpError) as refused:
            gradexp.run(f"tracking.uri={store}", "model._target_=my_models.build", *FROZEN,
                        launch_dir=tmp_path)
    assert refused.value.line == shadowed_line("my_models", old)
    assert refused.value.exit_code == 2


def test_two_unseeded_calls_of_a_builder_start_from_other_weights(tmp_path, store, monkeypatch):
    # Each call put the session's random state back, so each drew the same seeds for Keras'
    # default initializers: two calls trained from the very same weights, where two command
    # lines do not (docs/user-code.md: "each run of this builder starts from other weights")
    session = random.getstate()
    with user_modules(tmp_path, monkeypatch, unseeded=UNSEEDED):
        first, second = (gradexp.run(f"tracking.uri={store}", "model._target_=unseeded.build",
                                     *FROZEN, launch_dir=tmp_path).final_loss for _ in range(2))
    assert first != second
    assert random.getstate() == session  # the session's own stream is not reseeded
