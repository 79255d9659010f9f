"""Screenshots of the MLflow UI comparing a gradexp sweep (docs/make_screenshots.sh runs this).

Drives headless Chromium over its DevTools pipe (standard library only, no Selenium or
Playwright): load a page, wait until it shows what it should, click what a person would click,
save a PNG. The columns and charts come from a *shared view* stored as an experiment tag, which is
what the UI's own "Share" button writes; the run colors from each run's `mlflow.runColor` tag
(what the UI's color picker writes). Both are written into the store given, meant to be the
throwaway one make_screenshots.sh creates.

    python docs/screenshot.py --ui http://127.0.0.1:PORT --store sqlite:///PATH/mlflow.db \
        --experiment loss_comparison --out docs
"""

from __future__ import annotations

import argparse
import base64
import colorsys
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

WIDTH, HEIGHT = 1600, 1000
SHARE_KEY = "gradexp-sweep"
RUN_LIST_WIDENING = 110  # px added to the run list of the chart view (295 px by default)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  f"--window-size={WIDTH},{HEIGHT}", "--remote-debugging-pipe"]
# MLflow 3's UI opens its "Assistant" side panel on the first visit to a local server; a fresh
# browser profile is always a first visit, so mark that visit as done before any page loads.
BEFORE_EACH_PAGE = "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"


class Chromium:
    """Headless Chromium with one page, spoken to over --remote-debugging-pipe (fds 3 and 4)."""

    def __init__(self, binary: str = "chromium") -> None:
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        commands_in, self._commands = os.pipe()  # the browser reads commands on its fd 3
        self._replies, replies_out = os.pipe()  # and writes replies and events on its fd 4

        def wire_pipes() -> None:  # in the child, before exec
            read_end, write_end = os.dup(commands_in), os.dup(replies_out)
            os.dup2(read_end, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire_pipes, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(commands_in)
        os.close(replies_out)
        self._last_id, self._buffer, self.session = 0, b"", None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        self.call("Page.enable")
        self.call("Page.addScriptToEvaluateOnNewDocument", source=BEFORE_EACH_PAGE)
        self.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        """Send one DevTools command and return its result (events in between are skipped)."""
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._replies, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"in the page: {result['exceptionDetails'].get('exception', {})}")
        return result.get("result", {}).get("value")

    def open(self, url: str, ready: str) -> None:
        """Go to `url` and wait until the JavaScript expression `ready` is true."""
        self.call("Page.navigate", url=url)
        self.wait_for(ready)

    def wait_for(self, ready: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(f"(() => {{ try {{ return Boolean({ready}); }} "
                                "catch (error) { return false; } })()"):  # page still loading
            if time.monotonic() > deadline:
                raise RuntimeError(f"not ready after {timeout:.0f} s: {ready}")
            time.sleep(0.5)
        time.sleep(3)  # the rest of the page loads, charts animate in

    def act(self, steps: str) -> None:
        """Run JavaScript statements in the page; `await pause(ms)` waits."""
        self.evaluate("(async () => { const pause = ms => new Promise(r => setTimeout(r, ms));"
                      f"{steps} }})()")

    def drag(self, x: float, y: float, to_x: float) -> None:
        """Press the left mouse button at (x, y), move it to (to_x, y) in steps, let go."""
        mouse = {"button": "left", "y": y}
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        self.call("Input.dispatchMouseEvent", type="mousePressed", x=x, clickCount=1, **mouse)
        for step in range(1, 11):
            self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x + (to_x - x) * step / 10,
                      **mouse)
        self.call("Input.dispatchMouseEvent", type="mouseReleased", x=to_x, clickCount=1, **mouse)
        time.sleep(2)

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        print(f"wrote {path}")

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


def newest_sweep(client, exp_id: str) -> tuple:
    """The parent run of the experiment's newest sweep (the one the runs table expands) and its
    child runs."""
    parents = client.search_runs([exp_id], "tags.`gradexp.sweep` = 'true'",
                                 order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise SystemExit(f"no sweep in experiment {exp_id}: run `python -m gradexp -m ...` first")
    parent = parents[0]
    children = client.search_runs([exp_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    return parent, children


def color_runs(client, parent, runs: list) -> None:
    """One hue per loss, one shade per learning rate (light = small), as each run's
    mlflow.runColor tag, so the curves of the mse runs and of the mae runs tell apart at a glance
    (MLflow's own colors come from the run ids); the sweep's parent run gray."""
    client.set_tag(parent.info.run_id, "mlflow.runColor", "#8c8c8c")
    hues = [0.0, 0.6, 0.33, 0.78, 0.08, 0.5]  # red, blue, green, purple, orange, teal
    known = ["mse", "mae", "huber", "log_cosh"]
    losses = sorted({run.data.params.get("loss.name", "") for run in runs},
                    key=lambda name: (known.index(name) if name in known else len(known), name))
    for n, loss in enumerate(losses):
        hue = hues[n % len(hues)]
        group = sorted((run for run in runs if run.data.params.get("loss.name", "") == loss),
                       key=lambda run: float(run.data.params.get("optimizer.learning_rate", 0)))
        for i, run in enumerate(group):
            lightness = 0.62 - 0.34 * i / max(len(group) - 1, 1)
            rgb = colorsys.hls_to_rgb(hue, lightness, 0.75)
            client.set_tag(run.info.run_id, "mlflow.runColor",
                           "#" + "".join(f"{round(255 * c):02x}" for c in rgb))


def zoom(runs: list, key: str) -> dict:
    """A y range around the runs' final values of `key` (their early epochs may leave it)."""
    finals = [run.data.metrics[key] for run in runs if key in run.data.metrics]
    low, high = min(finals), max(finals)
    pad = max(high - low, 1e-3 * abs(high)) * 0.6
    return {"yMin": low - pad, "yMax": high + pad}


def share_sweep_view(store: str, experiment: str) -> str:
    """Store the view to show as a shared view of the experiment; return the experiment id.

    Columns: the swept params, the held-out metrics every run shares (val/mse, val/mae), the
    fitted W and b, and which run is the sweep's best. Charts (first section, two columns): the
    val/mse and val/mae curves side by side (val/mse zoomed to the runs' final values), parallel
    coordinates of the params against both, the intercept b over the epochs. Colors the newest
    sweep's runs by loss (color_runs)."""
    from mlflow import MlflowClient

    client = MlflowClient(store)
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    parent, runs = newest_sweep(client, exp_id)
    color_runs(client, parent, runs)
    params = ["loss.name", "optimizer.learning_rate"]
    metrics = ["val/mse", "val/mae"]
    section = "gradexp-sweep"
    chart = {"runsCountToCompare": 20, "metricSectionId": section, "deleted": False,
             "isGenerated": False}
    line = {**chart, "type": "LINE", "scaleType": "linear", "xAxisKey": "step",
            "xAxisScaleType": "linear", "yAxisKey": "metric", "yAxisExpressions": [],
            "selectedXAxisMetricKey": "", "lineSmoothness": 0, "range": {},
            "ignoreOutliers": False, "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False}
    charts = [
        {**line, "uuid": "gradexp-val-mse", "metricKey": "val/mse",
         "range": zoom(runs, "val/mse")},
        {**line, "uuid": "gradexp-val-mae", "metricKey": "val/mae"},
        {**chart, "uuid": "gradexp-parallel", "type": "PARALLEL", "selectedParams": params,
         "selectedMetrics": metrics, "showAllRuns": False},
        {**line, "uuid": "gradexp-b", "metricKey": "b"},
    ]
    columns = ([f"params.`{key}`" for key in params]
               + [f"metrics.`{key}`" for key in (*metrics, "W", "b")]
               + ["tags.`gradexp.best_in_sweep`"])
    state = {
        "selectedColumns": columns,
        "columnOrder": ["attributes.`Run Name`", "runDateAndNestInfo", "duration", *columns],
        "columnWidths": {"attributes.`Run Name`": 305, "runDateAndNestInfo": 140, "duration": 80,
                         "params.`loss.name`": 90, "params.`optimizer.learning_rate`": 155,
                         **{column: 120 for column in columns if column.startswith("metrics")},
                         "tags.`gradexp.best_in_sweep`": 155},
        "runsHiddenMode": "SHOW_ALL",
        "compareRunCharts": charts,
        "compareRunSections": [{"uuid": section, "name": "Validation", "display": True,
                                "isReordered": False, "deleted": False, "isGenerated": False,
                                "columns": 2, "cardHeight": 320}],
        "isAccordionReordered": True,
        "hideEmptyCharts": True,
    }
    client.set_experiment_tag(exp_id, f"mlflow.sharedViewState.{SHARE_KEY}", json.dumps(state))
    return exp_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ui", required=True, help="http://127.0.0.1:PORT of `mlflow ui`")
    parser.add_argument("--store", required=True, help="the same store, e.g. sqlite:///mlflow.db")
    parser.add_argument("--experiment", default="loss_comparison")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    exp_id = share_sweep_view(args.store, args.experiment)
    browser = Chromium()
    try:
        # 1. The runs table: the newest sweep (its parent run) expanded, a row per job, with
        #    the params that differ and the held-out metrics as columns. (Sorting by a metric
        #    would flatten the sweep's nesting; the gradexp.best_in_sweep column marks the best.)
        browser.open(f"{args.ui}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
                     f"&viewStateShareKey={SHARE_KEY}",
                     ready="document.body.innerText.includes('val/mae')")
        browser.act("""
            document.querySelector('[aria-label="Hide banner"]')?.click();  // "shared view"
            document.querySelector('[aria-label="Toggle sidebar"]').click();  // room for columns
            document.querySelector('[data-component-id$="runnamecellrenderer.tsx_46"]').click();
            await pause(2000);""")
        browser.screenshot(args.out / "mlflow-ui-sweep.png")
        # 2. The chart view of the same runs: the val/mse and val/mae curves side by side,
        #    parallel coordinates (params -> both metrics), the intercept b per epoch.
        browser.act("""
            document.querySelector('input[value=CHART]').click();
            await pause(3000);
            document.querySelector('.is-visibility-toggle-checkbox').click();  // hide the parent
            const style = document.createElement('style');  // plot toolbars: hover-only clutter
            style.textContent = '.modebar-container { display: none !important; }';
            document.head.append(style);""")
        # The run list beside the charts: wide enough for the run names (loss and learning rate).
        x, y = browser.evaluate("(() => { const r = document.querySelector('[handleaxis=e] .bar')"
                                ".getBoundingClientRect(); return [r.x + r.width / 2, r.y + 100];"
                                " })()")
        browser.drag(x, y, x + RUN_LIST_WIDENING)
        browser.wait_for("document.body.innerText.includes('Parallel Coordinates')")
        browser.screenshot(args.out / "mlflow-ui-compare.png")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
