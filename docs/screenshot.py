"""Screenshots of the MLflow UI comparing a gradexp sweep (docs/make_screenshots.sh runs this).

Drives headless Chromium over its DevTools pipe (standard library only, no Selenium or
Playwright): load a page, wait until it shows what it should, click what a person would click,
save a PNG. The columns and charts come from a *shared view* stored as an experiment tag, which is
what the UI's own "Share" button writes.

    python docs/screenshot.py --ui http://127.0.0.1:PORT --store sqlite:///PATH/mlflow.db \
        --experiment optimizer_comparison --out docs
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

WIDTH, HEIGHT = 1600, 1000
SHARE_KEY = "gradexp-sweep"
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


def share_sweep_view(store: str, experiment: str) -> str:
    """Store the view to show as a shared view of the experiment; return the experiment id.

    Columns: the params the sweep varies and the final metrics. Charts (first section): parallel
    coordinates of those params against final_loss, the loss curves (log scale), final_loss."""
    from mlflow import MlflowClient

    client = MlflowClient(store)
    exp_id = client.get_experiment_by_name(experiment).experiment_id
    params = ["optimizer.name", "loss.name", "optimizer.learning_rate"]
    section = "gradexp-sweep"
    chart = {"runsCountToCompare": 20, "metricSectionId": section, "deleted": False,
             "isGenerated": False}
    charts = [
        {**chart, "uuid": "gradexp-parallel", "type": "PARALLEL", "selectedParams": params,
         "selectedMetrics": ["final_loss"], "showAllRuns": False},
        {**chart, "uuid": "gradexp-loss", "type": "LINE", "metricKey": "loss",
         "displayName": "loss (log scale)", "scaleType": "log", "xAxisKey": "step",
         "xAxisScaleType": "linear", "yAxisKey": "metric", "yAxisExpressions": [],
         "selectedXAxisMetricKey": "", "lineSmoothness": 0, "range": {},
         "ignoreOutliers": False, "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False},
        {**chart, "uuid": "gradexp-final-loss", "type": "BAR", "metricKey": "final_loss"},
    ]
    state = {
        "selectedColumns": [f"params.`{key}`" for key in params]
        + [f"metrics.`{key}`" for key in ("final_loss", "grad_norm", "W", "b")],
        "runsHiddenMode": "SHOW_ALL",
        "compareRunCharts": charts,
        "compareRunSections": [{"uuid": section, "name": "Sweep", "display": True,
                                "isReordered": False, "deleted": False, "isGenerated": False}],
        "isAccordionReordered": True,
        "hideEmptyCharts": True,
    }
    client.set_experiment_tag(exp_id, f"mlflow.sharedViewState.{SHARE_KEY}", json.dumps(state))
    return exp_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ui", required=True, help="http://127.0.0.1:PORT of `mlflow ui`")
    parser.add_argument("--store", required=True, help="the same store, e.g. sqlite:///mlflow.db")
    parser.add_argument("--experiment", default="optimizer_comparison")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    exp_id = share_sweep_view(args.store, args.experiment)
    browser = Chromium()
    try:
        # 1. The runs table: the newest sweep (its parent run) expanded, a row per job, with
        #    the params that differ and the final metrics as columns.
        browser.open(f"{args.ui}/#/experiments/{exp_id}/runs?workflowType=machine_learning"
                     f"&viewStateShareKey={SHARE_KEY}",
                     ready="document.body.innerText.includes('optimizer.name')")
        browser.act("""
            document.querySelector('[aria-label="Hide banner"]')?.click();  // "shared view"
            document.querySelector('[data-component-id$="runnamecellrenderer.tsx_46"]').click();
            await pause(2000);""")
        browser.screenshot(args.out / "mlflow-ui-sweep.png")
        # 2. The chart view of the same runs: parallel coordinates (params -> final_loss),
        #    the loss curves overlaid, final_loss per run.
        browser.act("""
            document.querySelector('input[value=CHART]').click();
            await pause(3000);
            document.querySelector('.is-visibility-toggle-checkbox').click();  // hide the parent
            const style = document.createElement('style');  // plot toolbars: hover-only clutter
            style.textContent = '.modebar-container { display: none !important; }';
            document.head.append(style);""")
        browser.wait_for("document.body.innerText.includes('Parallel Coordinates')")
        browser.screenshot(args.out / "mlflow-ui-compare.png")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
