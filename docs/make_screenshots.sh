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

# 1. A real sweep: 5 optimizers x 2 losses, 100 epochs each -> ./mlflow.db (about a minute).
python -m gradexp experiment=optimizer_comparison -m

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

# 3. The screenshots: the runs table with the sweep expanded; the chart view of its runs.
python "$docs/screenshot.py" --ui "http://127.0.0.1:$port" --store "sqlite:///$work/mlflow.db" \
    --experiment optimizer_comparison --out "$docs"
