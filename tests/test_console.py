"""gradexp.console: the terminal's lines, here where a stream they go to is closed."""

from __future__ import annotations

import logging
import os
import sys


def test_a_log_handler_whose_pipe_closed_silences_that_stream_only(tmp_path, monkeypatch):
    """hydra.job_logging.handlers.console.stream=ext://sys.stderr and stderr a pipe whose
    reader left: the handler's writes go nowhere from then on, and stdout (here a file) still
    gets every line. Before, stdout was pointed at /dev/null whichever stream broke."""
    from gradexp.console import StdoutLogHandler

    out = open(tmp_path / "stdout.txt", "w")  # noqa: SIM115 - stands in for sys.stdout
    monkeypatch.setattr(sys, "stdout", out)
    read, write = os.pipe()
    stream = os.fdopen(write, "w")
    os.close(read)  # the reader has gone: the next write meets a closed pipe
    handler = StdoutLogHandler(stream)
    try:
        handler.emit(logging.LogRecord("gradexp", logging.INFO, __file__, 1, "lost", None, None))
        assert os.path.samestat(os.fstat(write), os.stat(os.devnull))  # that stream: nowhere
        print("still here", file=out, flush=True)
    finally:
        stream.close()
        out.close()
    assert (tmp_path / "stdout.txt").read_text() == "still here\n"


def test_a_long_reason_is_cut_at_a_sentence_or_a_word_and_says_so():
    # Keras' get_config message was cut mid-word: "... in order t)", "Please i)" (QA)
    from gradexp.console import reason

    keras_says = NotImplementedError(
        "Object MyModel was created by passing non-serializable argument values in `__init__()`, "
        "and therefore the object must override `get_config()` in order to be serializable. "
        "Please implement `get_config()`.")
    assert reason(keras_says) == (
        "NotImplementedError: Object MyModel was created by passing non-serializable argument "
        "values in `__init__()`, and therefore the object must override `get_config()` in "
        "order to be serializable. …")
    assert reason(ValueError("one two three four"), limit=24) == "ValueError: one two…"
    assert reason(ValueError("short")) == "ValueError: short"
