#!/usr/bin/env bash
# Redo docs/mlflow-ui-sweep.png and docs/mlflow-ui-compare.png from nothing: a real sweep,
# `mlflow ui` on its store, headless Chromium screenshots (docs/screenshot.py).
#   Needs: gradexp installed (pip install -e .), Debian's chromium (apt-get install -y chromium).
#   Usage: docs/make_screenshots.sh [WORK_DIR]      WORK_DIR: where the sweep runs (default: new temp)
set -euo pipefail
docs=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
cd "$work"

# 1. A real sweep: the loss_comparison preset (10% outliers in the training and validation data,
#    300 epochs) narrowed to mse and mae, each at learning rates 0.03, 0.1 and 0.3: 6 child runs,
#    all judged on the same held-out val/mse and val/mae -> ./mlflow.db (under a minute).
#    (-m goes first: the overrides after it are one list.)
python -m gradexp -m experiment=loss_comparison loss=mse,mae

# 2. The MLflow UI on that store, on a free port of 127.0.0.1 (its own session, so it can be
#    stopped with its workers). One worker and no job runner: it starts faster.
port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid mlflow ui --backend-store-uri "sqlite:///$work/mlflow.db" \
    --host 127.0.0.1 --port "$port" --workers 1 > ui.log 2>&1 &
ui=$!
trap 'kill -- "-$ui" 2>/dev/null; sleep 2; kill -9 -- "-$ui" 2>/dev/null || true' EXIT
for _ in $(seq 240); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
    sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" > /dev/null || { echo "mlflow ui did not start: $work/ui.log" >&2; exit 1; }

# 3. The screenshots: the runs table with the sweep expanded (val/mse, val/mae per run); the
#    chart view of its runs (val/mse and val/mae curves side by side).
python "$docs/screenshot.py" --ui "http://127.0.0.1:$port" --store "sqlite:///$work/mlflow.db" \
    --experiment loss_comparison --out "$docs"
