"""QA of scaling out: the Ray launchers refused in one line before a sweep's parent opens (a
running Ray that plain `ray` would join, an address where no Ray answers), credentials masked in
Hydra's launch lines, urllib3's retry warnings off the console, and HOST:PORT without a scheme
as a tracking.uri. No Ray is started here: a listening socket stands for a Ray head."""

from __future__ import annotations

import logging
import socket
import time

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from conftest import CONF, free_port
from gradexp.schema import ConfigError


def compose_hydra(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=True)


@pytest.fixture
def ray_head(tmp_path, monkeypatch):
    """A listening socket as a running Ray head; the Ray address file and RAY_ADDRESS as this
    test sets them (RAY_TMPDIR: Ray's temp folder, where `ray start` writes its address)."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with socket.socket() as head:
        head.bind(("127.0.0.1", 0))
        head.listen()
        yield f"127.0.0.1:{head.getsockname()[1]}"


def address_file(tmp_path, address: str) -> None:
    (tmp_path / "ray").mkdir(exist_ok=True)
    (tmp_path / "ray" / "ray_current_cluster").write_text(address)


def launch_error(*overrides: str) -> str | None:
    from gradexp.sweep_checks import check_launcher

    try:
        check_launcher(compose_hydra(*overrides))
    except ConfigError as error:
        return str(error)
    return None


@pytest.mark.parametrize("where", ["address_file", "RAY_ADDRESS"])
def test_plain_ray_launcher_is_refused_in_one_line_beside_a_running_ray(
        tmp_path, monkeypatch, ray_head, where):
    if where == "address_file":
        address_file(tmp_path, ray_head)  # what `ray start --head` leaves
    else:
        monkeypatch.setenv("RAY_ADDRESS", ray_head)
    said = launch_error("hydra/launcher=ray")
    assert said is not None and "\n" not in said
    assert said.startswith("hydra/launcher=ray starts a Ray for the sweep alone")
    assert ray_head in said and "hydra/launcher=ray_cluster" in said and "ray stop" in said
    # ray_cluster joins that Ray: nothing to refuse
    assert launch_error("hydra/launcher=ray_cluster") is None


def test_plain_ray_launcher_with_no_ray_running_is_left_to_start_its_own(tmp_path, ray_head):
    assert launch_error("hydra/launcher=ray") is None
    assert launch_error("hydra/launcher=ray", "hydra.launcher.ray.init.address=local") is None


def test_ray_cluster_address_where_no_ray_answers_is_refused_within_seconds(ray_head):
    closed = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    said = launch_error("hydra/launcher=ray_cluster", f"hydra.launcher.ray.init.address={closed}")
    assert time.monotonic() - started < 6
    assert said == (f"hydra.launcher.ray.init.address={closed}: no Ray answers there "
                    f"(Connection refused); start one (ray start --head --port="
                    f"{closed.rsplit(':', 1)[1]}) or give hydra.launcher.ray.init.address="
                    "HOST:PORT of a running head")
    # a running head at the address: joined
    assert launch_error("hydra/launcher=ray_cluster",
                        f"hydra.launcher.ray.init.address={ray_head}") is None


def test_a_stale_ray_address_file_is_named_with_how_to_clear_it(tmp_path, ray_head):
    address_file(tmp_path, f"127.0.0.1:{free_port()}")  # a Ray killed without `ray stop`
    said = launch_error("hydra/launcher=ray_cluster")
    assert said is not None and "ray_current_cluster" in said and "ray stop --force" in said


def test_sweep_with_plain_ray_beside_a_running_ray_exits_2_before_any_run(tmp_path, ray_head):
    from gradexp import GradexpError, sweep

    address_file(tmp_path, ray_head)
    store = tmp_path / "mlflow.db"
    with pytest.raises(GradexpError) as stopped:
        sweep("hydra/launcher=ray", f"tracking.uri=sqlite:///{store}", "optimizer=sgd,adam",
              launch_dir=tmp_path)
    assert stopped.value.exit_code == 2
    assert "hydra/launcher=ray_cluster" in str(stopped.value)
    assert not store.exists()  # no parent run: the store was never opened


# ------------------------------------------------------------------- credentials in log lines
HYDRA_LINE = r"#0 : tracking.uri=http\://alice\:s3cret@127.0.0.1\:40885 optimizer=sgd seed=1"


def test_masked_credentials_filter_masks_hydras_escaped_launch_line():
    from gradexp.console import MaskedCredentials

    record = logging.LogRecord("hydra._internal.core_plugins.basic_launcher", logging.INFO,
                               __file__, 1, "\t%s", (HYDRA_LINE,), None)
    assert MaskedCredentials().filter(record)
    assert record.getMessage() == \
        "\t#0 : tracking.uri=http\\://***@127.0.0.1\\:40885 optimizer=sgd seed=1"
    token = logging.LogRecord("x", logging.INFO, __file__, 1,
                              "#1 : +data.kwargs.token=abc https://bob:pw@host/x", (), None)
    MaskedCredentials().filter(token)
    assert token.getMessage() == "#1 : +data.kwargs.token=*** https://***@host/x"


@pytest.fixture
def hydra_logging(tmp_path):
    """Logging as Hydra sets it up from gradexp's configs; the test's own put back after."""
    from hydra.core.utils import configure_log

    cfg = compose_hydra()
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(tmp_path)
        cfg.hydra.job.name = "job"
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    def configure(which: str) -> None:
        configure_log(OmegaConf.create(OmegaConf.to_container(cfg.hydra[which], resolve=True)))

    yield configure
    for handler in root.handlers:
        handler.close()
    root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("which", ["hydra_logging", "job_logging"])
def test_launch_lines_through_gradexps_logging_show_no_password(hydra_logging, capsys, which,
                                                               tmp_path):
    hydra_logging(which)
    logging.getLogger("hydra_plugins.hydra_joblib_launcher._core").info("\t%s", HYDRA_LINE)
    out = capsys.readouterr().out
    assert "#0 : tracking.uri=http\\://***@127.0.0.1\\:40885" in out and "s3cret" not in out
    if which == "job_logging":
        assert "s3cret" not in (tmp_path / "job.log").read_text()


@pytest.mark.heavy  # ~6 s, ~19 s with the TensorFlow import
def test_a_sweep_prints_no_password_of_its_tracking_uri(tmp_path, capfd):
    from gradexp import sweep

    sweep("tracking=none", "tracking.uri=http://alice:s3cret@127.0.0.1:9", "optimizer=sgd,adam",
          "trainer.epochs=1", "gradcheck=off", launch_dir=tmp_path)
    out = capfd.readouterr()
    assert "tracking.uri=http\\://***@127.0.0.1\\:9" in out.out
    assert "s3cret" not in out.out + out.err


def test_urllib3_retry_warnings_stay_off_the_console_but_in_the_jobs_log(hydra_logging, capsys,
                                                                         tmp_path):
    hydra_logging("job_logging")
    pool = logging.getLogger("urllib3.connectionpool")
    pool.warning("Retrying (Retry(total=1)) after connection broken by 'refused': /api/2.0/x")
    pool.error("a real error")
    out = capsys.readouterr().out
    assert "Retrying" not in out and "a real error" in out
    assert "Retrying" in (tmp_path / "job.log").read_text()


# ---------------------------------------------------------------- tracking.uri without scheme
@pytest.mark.parametrize("typed", ["127.0.0.1:41327", "localhost:41327", "mlflow.lan:5000/x"])
def test_host_and_port_without_a_scheme_suggest_the_http_uri(typed, tmp_path):
    from gradexp.tracking_uri import check_store_kind, resolve_uri

    with pytest.raises(ConfigError) as refused:
        check_store_kind(resolve_uri(typed, tmp_path), shown=typed)
    assert str(refused.value) == (f"tracking.uri={typed}: HOST:PORT without a scheme is read "
                                  f"as a folder; for a tracking server write http://{typed}")
