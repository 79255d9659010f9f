"""What a person sees in the terminal: the config line, a progress bar, the summary table."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf
from rich.cells import cell_len
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

GROUPS = ("data", "model", "loss", "optimizer", "device", "trainer", "gradcheck", "tracking")


def quiet_libraries() -> None:
    """Keep the console to gradexp's own lines: no INFO chatter from the libraries underneath
    (MLflow's "Creating initial MLflow database tables...", matplotlib's "generated new
    fontManager"), which Hydra's logging setup (root logger at INFO) would let through. Their
    warnings and errors still show. MLFLOW_LOGGING_LEVEL, when a person sets it, wins.
    """
    mlflow_level = os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING").upper()
    logging.getLogger("mlflow").setLevel(mlflow_level)  # MLflow reads the variable on import
    for name in ("matplotlib", "alembic", "PIL"):
        logging.getLogger(name).setLevel(logging.WARNING)


class QuietRetries(logging.Filter):
    """Drops urllib3's connection-pool warnings ("Retrying (Retry(...)) after connection broken
    by ..."): QA, a tracking server that stopped mid-run gave ~10 of them before gradexp's one
    error line, which says it all. On the console handler of conf/hydra/job_logging/gradexp.yaml
    only: the job's .log file keeps them, and urllib3's errors still show."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "urllib3.connectionpool" and record.levelno < logging.ERROR)


# A word of a log line, its backslash-escaped characters (Hydra's `http\://host`) included
_WORD = re.compile(r"(?:\\.|\S)+")
# user:password@ after a scheme's ://, escaped (http\://a\:b@) or not
_USERINFO = re.compile(r"([A-Za-z][\w+.-]*\\?:(?:\\?/){2})[^\s/@]+@")


def masked_log_line(text: str) -> str:
    """`text` with each override in it (KEY=VALUE, as typed or as Hydra escapes it) shown as the
    params show it (run_params.masked_override), and any user:password@ in a URI cut out."""
    from hydra._internal.grammar.utils import escape_special_characters

    from gradexp.run_params import masked_override

    def masked(match: re.Match) -> str:
        word = match.group(0)
        if "=" not in word:
            return word
        plain = re.sub(r"\\(.)", r"\1", word)
        shown = masked_override(plain)
        if shown == plain:
            return word
        key, _, value = shown.partition("=")
        return f"{key}={escape_special_characters(value)}" if plain != word else shown

    return _USERINFO.sub(r"\1***@", _WORD.sub(masked, text))


class MaskedCredentials(logging.Filter):
    """The log lines of Hydra and its launchers (`#0 : tracking.uri=...`, a line per job, the
    URI's colons escaped) with credentials and secrets masked as the params mask them: QA, a sweep
    printed the password docs/errors.md says is never printed. On the handlers of
    conf/hydra/job_logging|hydra_logging/gradexp.yaml, so every logger's lines pass it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format is logging's own error to report
            return True
        shown = masked_log_line(message)
        if shown != message:
            record.msg, record.args = shown, ()
        return True


class _Console(Console):
    """Rich's console, but a closed stdout stops the printing only.

    `python -m gradexp | head` closes the pipe once head has its lines. Rich's own answer is
    SystemExit(1), which ended the run FAILED; the person only chose to see fewer lines."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        stream_to_devnull(self.file)


def stream_to_devnull(stream: Any) -> None:
    """Python's recipe for a closed stdout (docs: "Note on SIGPIPE"), for the stream that broke:
    point its file descriptor at os.devnull, so every later write (any console, the flush at
    exit) goes nowhere instead of failing."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # no file descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)  # behind it (a notebook, io.StringIO)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


class StdoutLogHandler(logging.StreamHandler):
    """The console handler of Hydra's logging (conf/hydra/job_logging/gradexp.yaml): its lines
    ([HYDRA] Launching 2 jobs locally) go to stdout too, and a closed stdout stops them as it
    stops the console, instead of a "--- Logging error ---" report for every line. The stream
    that broke is the one silenced: with handlers.console.stream=ext://sys.stderr a closed
    stderr leaves stdout (perhaps a file) as it is."""

    def handleError(self, record: logging.LogRecord) -> None:
        if isinstance(sys.exc_info()[1], BrokenPipeError):
            stream_to_devnull(self.stream)
            return
        super().handleError(record)


def console() -> Console:
    # soft_wrap: long lines (paths, links) stay whole, so they can be copied from the terminal.
    return _Console(file=sys.stdout, soft_wrap=True)


# The error lines this process said, the last one last: a sweep's parent that stops early
# takes it as its reason (gradexp.app)
SAID: list[str] = []


def error_line(message: str) -> None:
    """The one line a person reads when gradexp stops on something they can fix."""
    from rich.markup import escape

    SAID.append(message)
    # escaped: a value such as sweep.best_per=[optimizer.nam] is text, not a rich style tag
    Console(file=sys.stderr, soft_wrap=True, highlight=False).print(
        f"[bold red]error:[/bold red] {escape(message)}", markup=True)


def reason(error: BaseException, limit: int = 200) -> str:
    """`Type: message` in one line: the message's first paragraph, its line breaks joined
    (Keras wraps its messages, and starts some with a blank line: their first line alone was
    "Object SubObj was created by passing", or nothing)."""
    paragraph = str(error).strip().split("\n\n")[0]
    said = f"{type(error).__name__}: {' '.join(paragraph.split())}"
    if len(said) <= limit:
        return said
    # Cut at its last whole sentence within the limit, else at a word ("in order t" read as
    # gradexp's typo), and say that something was cut
    cut = said[:limit - 1]
    sentence = cut.rfind(". ")
    return cut[:sentence + 1] + " …" if sentence > limit // 2 else cut.rsplit(" ", 1)[0] + "…"


def note_line(message: str) -> None:
    """One line about something gradexp did instead of what was asked; not an error."""
    from rich.markup import escape

    Console(file=sys.stderr, soft_wrap=True, highlight=False).print(
        f"[bold yellow]note:[/bold yellow] {escape(message)}", markup=True)


def print_config(cfg: DictConfig, masked: Mapping[str, Any]) -> None:
    """One line: the option of each group and the command line's overrides. The whole config
    (~80 keys) is `--cfg job` away and in the run's config.yaml; printing it before every run
    pushed the run's own lines off the screen."""
    from hydra.core.hydra_config import HydraConfig

    from gradexp.run_params import masked_override

    chosen = " ".join(f"{group}={masked[group + '.name']}" for group in GROUPS
                      if group + ".name" in masked)
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    # An override is shown as typed, secrets masked and credentials cut out as the params
    # show them (its logged value read seed=null back as seed=None, which is refused: QA)
    overrides = [masked_override(item) for item in overrides]
    changed = f" · overrides: {' '.join(overrides)}" if overrides else ""
    # Not markup: the options and overrides are the person's text, and rich read the list in
    # `data.features=[area,rooms]` as a style tag and dropped it (QA)
    console().print(f"config: {chosen}{changed} (every key: --cfg job)", highlight=False,
                    soft_wrap=True, markup=False)


def progress(total: int, completed: int = 0) -> Progress:
    """A progress bar over epochs showing the latest loss (from `completed`, after a resume)."""
    bar = Progress(TextColumn("[bold]epoch"), MofNCompleteColumn(), BarColumn(),
                   TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(),
                   console=console(), transient=False)
    bar.add_task("train", total=total, completed=completed, loss="-")
    return bar


def print_summary(rows: Mapping[str, Any]) -> None:
    """The end-of-run table: final loss, W and b, gradient-check verdict, where the run is."""
    from rich.markup import escape

    table = Table(title="gradexp run", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows.items():
        if value is not None:  # escaped: your metrics' and layers' names are text, not markup
            table.add_row(escape(key), escape(f"{value:.6g}" if isinstance(value, float)
                                              else str(value)))
    print_table(table)


NAME_MIN_WIDTH = 16  # the first column (a run's or a row's name) may fold, but not thinner


def print_table(table: Table) -> None:
    """Print a table so that nothing is cut and no number is split across lines.

    The first column (a name) may fold; in every other column each word stays whole on one line
    (a number, a status, a run id). When the console is too narrow for that (COLUMNS=40, a
    log file's 80 columns and long run names), the rows are printed as lines instead: the
    terminal wraps them, nothing cuts them. Cells and headers are rich markup (a person's text
    in them escaped: rich.markup.escape), in the table and in those lines alike.
    """
    out = console()
    columns = table.columns
    words = [max((cell_len(word) for text in (column.header, *column.cells)
                  for word in str(text).split()), default=1) for column in columns[1:]]
    needed = NAME_MIN_WIDTH + sum(words) + 3 * len(columns) + 1  # + borders and padding
    if needed <= out.width:
        columns[0].overflow = "fold"
        for column, width in zip(columns[1:], words):
            column.min_width = width
        out.print(table)
        return
    if table.title:
        out.print(table.title, style="bold", highlight=False)
    headers = [str(column.header) for column in columns]
    for row in zip(*(list(column.cells) for column in columns)):
        name, *rest = (str(cell) for cell in row)
        if table.show_header:
            out.print(name, highlight=False)
            out.print("  " + "  ".join(f"{header}: {value}" for header, value
                                       in zip(headers[1:], rest)), highlight=False)
        else:
            out.print(f"{name}: {'  '.join(rest)}", highlight=False)


def to_plain(cfg: DictConfig) -> dict:
    """The resolved config as plain Python values (enums as their names)."""
    return OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
