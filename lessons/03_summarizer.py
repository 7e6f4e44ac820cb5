"""Lesson 03 · The cheap summarizer and its prompt
Motto: the summarizer reads the history as a document, not as a conversation it takes part in.

The problem: lesson 02 replaced the middle with "a summary". What exactly does the summarizer see,
what is it asked for, and how does its answer go back into the history without being mistaken
for a new instruction?

How it works:

    middle (chat dicts) ─► transcript(): one tagged text
      ─► summary_request(): [system: SUMMARY_PROMPT, user: <transcript>…</transcript>]
      ─► a cheap model, no tools, temperature 0.1 ─► summary text
      ─► summary_message(): a USER message framed as reference material, ending with "continue"

Without a model, summarize_offline extracts the same sections (goal, constraints, decisions, files,
errors, ...) with regular expressions: deterministic, free, and the fallback when the model fails.

What changed since lesson 02: nothing in the loop; we open the `summarize` box it called.
Try it: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) and re-run to compare the model's
summary with the offline one; change SEED for another conversation.
Explains compact.py: transcript, SUMMARY_PROMPT, summary_request, summarize_with_model,
summarize_offline, summarize_default, summary_message (section 3 "the summary").
Run: python lessons/03_summarizer.py
"""

import textwrap

import show
from compact import (SUMMARY_PROMPT, find_cut, model_configured, summarize_default, summarize_offline,
                     summarize_with_model, summary_message, summary_request, transcript)
from conversations import generate_conversation

SEED = 3


class NotSent(Exception):
    pass


class RecordingClient:
    """Stands in for openai.OpenAI: keeps the request summarize_with_model builds, and sends nothing."""

    def __init__(self):
        self.chat = self.completions = self  # so that client.chat.completions.create(...) lands below
        self.request: dict = {}

    def create(self, **request):
        self.request = request
        raise NotSent


def indented(text: str, lines: int, width: int = 100) -> None:
    rows = [row for row in text.splitlines() if row.strip()]
    for row in rows[:lines]:
        print("    " + (row if len(row) <= width else row[: width - 1] + "…"))
    if len(rows) > lines:
        print(f"    … {len(rows) - lines} more lines")


def main() -> None:
    messages = generate_conversation(10, seed=SEED).messages
    middle = messages[1:find_cut(messages, 6, head=1)]  # what lesson 02's compact_messages would summarize

    show.banner("1. The middle becomes one tagged text")
    text = transcript(middle)
    tags = [line for line in text.splitlines() if line.startswith("[") and not line.startswith("[…")]
    print(f"[transcript] {len(middle)} chat messages → {len(text.splitlines())} lines, {len(text):,} "
          "chars; its first tagged lines (output lines between them not shown):")
    indented("\n".join(tags), 9)
    print("[why] as chat roles, the summarizer would take part: answer the user, obey an instruction")
    print("[why] inside a tool output, or try to continue the calls. As tagged text inside one user")
    print("[why] message it is data to describe; long outputs keep only their head and tail.")

    show.banner("2. The prompt")
    for paragraph in SUMMARY_PROMPT.splitlines():
        print(textwrap.fill(paragraph, 100, initial_indent="    ", subsequent_indent="    "))

    show.banner("3. The request summarize_with_model sends")
    client = RecordingClient()
    try:
        summarize_with_model(middle, client=client)
    except NotSent:
        pass
    request = client.request
    print(f"[request] parameters: {', '.join(sorted(request))}; no tools, so the summarizer cannot act")
    print(f"[request] model={request['model']!r} (SUMMARY_MODEL), temperature={request['temperature']}: "
          "a cheap model, and little randomness")
    for m in request["messages"]:
        print(f"[request] {m['role']:<6} {len(m['content']):>6,} chars, starts: {m['content'][:50]!r}")
    again = summary_request([summary_message("## Goal\n- fix the tokens"), *middle[-4:]])
    print(f"[request] with an earlier summary in the middle, the user part starts: "
          f"{again[1]['content'][:36]!r}")

    show.banner("4. The summary")
    offline = summarize_offline(middle)
    print(f"[summary] offline summarizer ({len(offline):,} chars, from {len(text):,} chars of transcript):")
    indented(offline, 16)
    if model_configured():
        print("[summary] the configured model (summarize_default falls back to offline if it fails):")
        indented(summarize_default(middle), 16)
    else:
        print("[summary] no model configured: set OPENAI_API_KEY or OPENAI_BASE_URL to see a model's summary")

    show.banner("5. How the summary goes back into the history")
    framed = summary_message(offline)
    lines = framed["content"].splitlines()
    print(f"[framing] role={framed['role']!r}, content:")
    print(textwrap.fill(lines[0], 100, initial_indent="    ", subsequent_indent="    "))
    print(f"    … the {len(lines) - 4} lines of the summary …")
    print(f"    {lines[-1]}")
    print("[framing] user, not system: a system message in the middle is refused by some providers and")
    print("[framing] would turn old notes into rules; not assistant: the model would take it as its own words")
    print(f"[lesson 03] done: {len(middle)} messages → {len(text):,}-char transcript → "
          f"{len(offline):,}-char offline summary in a {framed['role']} message")


if __name__ == "__main__":
    main()
