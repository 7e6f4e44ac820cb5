#!/usr/bin/env bash
# Re-measure what RESPONSES.md records: curl the agent's first request (system prompt, one task,
# tiny_agent.TOOL_SCHEMAS, tool_choice auto, max_tokens 256) and the awkward ones at each server.
# Start the servers first (each line prints its base URL):
#   bash tests/live/serve_llama.sh --background                              # 8765 llama-cpp-python
#   bash tests/live/serve_llama_server.sh --background                       # 8766 llama-server, SmolLM2
#   JINJA=0 PORT=8767 bash tests/live/serve_llama_server.sh --background     # 8767 --no-jinja
#   MODEL=gemma PORT=8768 bash tests/live/serve_llama_server.sh --background # 8768 Gemma 3 270M
# then: bash tests/live/measure.sh   (a server that is not up prints HTTP 000). temperature 0 throughout.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="$(mktemp -d)"; trap 'rm -rf "$DIR"' EXIT

# 1. The request bodies, from the agent's own prompt and schemas (importing tiny_agent needs no deps).
cd "$ROOT" && python3 - "$DIR" <<'EOF'
import json, sys
import tiny_agent as t
out = sys.argv[1]
task = "Read every file in this folder, one by one, with read_file, and tell me what each one says."
first = [{"role": "system", "content": t.SYSTEM_PROMPT}, {"role": "user", "content": task}]
call = lambda i: {"id": f"call_{i}", "type": "function",
                  "function": {"name": "read_file", "arguments": json.dumps({"path": f"notes_{i}.txt"})}}
result = lambda i: {"role": "tool", "tool_call_id": f"call_{i}", "content": f"note {i}: the meeting moved to room {100 + i}.\n"}
notes = " ".join(f"Note {n}: the meeting in room {100 + n} moved to the afternoon." for n in range(400))
cases = {
    "tools": first, "no_tools": first,
    "two_users": first + [{"role": "user", "content": "Start with notes_1.txt."}],
    "tool_loop": first + [{"role": "assistant", "content": "", "tool_calls": [call(1)]}, result(1)],
    "parallel": first + [{"role": "assistant", "content": "", "tool_calls": [call(1), call(2)]}, result(1), result(2)],
    "too_big": [first[0], {"role": "user", "content": f"{task} My notes: {notes}"}],  # ~25 KB, ~7,600 tokens
}
for name, messages in cases.items():
    body = {"model": "m", "messages": messages, "max_tokens": 256, "temperature": 0}
    if name != "no_tools":
        body.update(tools=t.TOOL_SCHEMAS, tool_choice="auto")
    json.dump(body, open(f"{out}/{name}.json", "w"))
EOF

# 2. curl one case: status, time, then the body (generated text cut to 300 characters).
ask() {  # ask PORT CASE [PATH]
  echo "--- :$1 $2 ${3:-/v1/chat/completions}"
  curl -s -m 120 -o "$DIR/out" -w 'HTTP %{http_code} in %{time_total}s\n' -H 'Content-Type: application/json' \
       -d @"$DIR/$2.json" "http://127.0.0.1:$1${3:-/v1/chat/completions}"
  python3 -c 'import json,sys
raw = open(sys.argv[1]).read()
try: d = json.loads(raw)
except ValueError: print(raw[:1000]); sys.exit()
for c in d.get("choices", []): c["message"]["content"] = (c["message"].get("content") or "")[:300] or None
d.pop("timings", None); print(json.dumps(d, ensure_ascii=False))' "$DIR/out"
}
for case in tools no_tools too_big; do ask 8765 $case; done                # llama-cpp-python, chatml-function-calling
for case in tools no_tools too_big; do ask 8766 $case; done                # llama-server, SmolLM2's template
ask 8766 tools /apply-template; ask 8766 no_tools /apply-template          # are the tools rendered?
ask 8767 tools; ask 8767 no_tools                                          # --no-jinja
for case in tools two_users tool_loop parallel too_big; do ask 8768 $case; done   # Gemma 3 270M
curl -s http://127.0.0.1:8766/props | python3 -c 'import json,sys; d=json.load(sys.stdin); print("--- :8766 /props build_info", d["build_info"], d["chat_template_caps"])'
