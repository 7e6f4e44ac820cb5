"""Lesson 03 · The cheap summarizer and its prompt
Motto: the summarizer reads the history as a document, not as a conversation it takes part in.

The problem: lesson 02 replaced the middle with "a summary". What exactly does the summarizer see,
what is it asked for, what if the middle is larger than the summary model's own window, and how
does its answer go back into the history without being mistaken for a new instruction?

How it works:

    middle (chat dicts) ─► transcript_lines(): tagged lines; the task and the latest request are kept
      ─► transcript_chunks(): pieces that fit the summary model's window, each with those two lines
      ─► summary_request(previous, piece): [system: SUMMARY_PROMPT, user: <transcript>…</transcript>]
      ─► a cheap model, no tools, temperature 0.1 ─► summary text, folded into the next piece's request
      ─► backfill(): what the extractive pass finds and the model left out is appended
      ─► summary_message(): a USER message framed as reference material, ending with "continue"

summary_window() is the summary model's window: SUMMARY_CONTEXT_WINDOW, else CONTEXT_WINDOW. Without
a model, summarize_offline extracts a short summary (the task, what the user said, identifiers,
errors, progress) with regular expressions: deterministic, free, and the fallback when the model
fails. Part II's summarize_structured (lesson 10) extracts more sections.

What changed since lesson 02: nothing in the loop; we open the `summarize` box it called.
Try it: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) and re-run to compare the model's
summary with the offline one; set WINDOW to 3_000 for more pieces; change SEED for another conversation.
Explains compact.py Part I: transcript_lines, transcript_chunks, summary_request, SUMMARY_PROMPT,
summary_window, summarize_with_model, backfill, summarize_default ("The model summarizer"),
summarize_offline ("The offline summarizer"), summary_message ("The summary message").
Run: python lessons/03_summarizer.py
"""

import textwrap
from types import SimpleNamespace

import show
from compact import (SUMMARY_PROMPT, backfill, content_text, find_cut, model_configured, summarize_default,
                     summarize_offline, summarize_with_model, summary_message, summary_window, text_tokens,
                     transcript_chunks, transcript_lines, user_requests)
from conversations import generate_conversation

SEED, TURNS = 3, 20
WINDOW = 5_000  # a small summary model, so the middle does not fit in one request


class StandInClient:
    """Stands in for openai.OpenAI: keeps every request summarize_with_model builds and answers each
    with a fixed, weak summary. It is not a model, and nothing is sent anywhere."""

    def __init__(self):
        self.chat = self.completions = self  # so that client.chat.completions.create(...) lands below
        self.requests: list[dict] = []

    def create(self, **request):
        self.requests.append(request)
        answer = f"## Goal\n- Fix the stale token refresh (stand-in answer {len(self.requests)})."
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=answer))])


def indented(text: str, lines: int, width: int = 100) -> None:
    rows = [row for row in text.splitlines() if row.strip()]
    for row in rows[:lines]:
        print("    " + (row if len(row) <= width else row[: width - 1] + "…"))
    if len(rows) > lines:
        print(f"    … {len(rows) - lines} more lines")


def main() -> None:
    messages = generate_conversation(TURNS, seed=SEED).messages
    middle = messages[1:find_cut(messages, 6, head=1)]  # what lesson 02's compact_messages would summarize
    task, latest = (content_text(m) for m in (user_requests(middle)[0], user_requests(middle)[-1]))

    show.banner("1. The middle becomes tagged lines")
    lines = transcript_lines(middle)
    print(f"[transcript] {len(middle)} chat messages → {len(lines)} tagged lines, "
          f"{sum(must for _, must in lines)} of them must be kept (the task and the latest request):")
    indented("\n".join(line.split("\n")[0] for line, _ in lines), 7)
    print("[why] as chat roles, the summarizer would take part: answer the user, obey an instruction")
    print("[why] inside a tool output, or try to continue the calls. As tagged text inside one user")
    print("[why] message it is data to describe; long outputs keep only their head and tail.")

    show.banner("2. The prompt")
    for paragraph in SUMMARY_PROMPT.splitlines():
        print(textwrap.fill(paragraph, 100, initial_indent="    ", subsequent_indent="    "))

    show.banner("3. A middle larger than the summary model's window")
    print(f"[window] summary_window() = {summary_window():,} tokens here (SUMMARY_CONTEXT_WINDOW, else "
          "CONTEXT_WINDOW, else 128,000)")
    client = StandInClient()
    answer = summarize_with_model(middle, client=client, window=WINDOW)
    whole = text_tokens("\n".join(transcript_chunks(middle, 10**6)))
    print(f"[window] with window={WINDOW:,} the ~{whole:,}-token transcript is read in {len(client.requests)} "
          "pieces, oldest first; each request:")
    for n, request in enumerate(client.requests, start=1):
        user = request["messages"][1]["content"]
        print(f"[request] {n}: ~{text_tokens(user):,} tokens; the task: {task in user}, the latest request: "
              f"{latest in user}, the summary so far: {'<previous_summary>' in user}")
    request = client.requests[-1]
    print(f"[request] parameters: {', '.join(sorted(request))}; no tools, so the summarizer cannot act")
    print(f"[request] model={request['model']!r} (SUMMARY_MODEL), temperature={request['temperature']}, "
          f"max_tokens={request['max_tokens']:,}: a cheap model, little randomness, a bounded answer")
    print(f"[request] {request['messages'][0]['role']} is SUMMARY_PROMPT; the last user part starts: "
          f"{request['messages'][1]['content'][:48]!r}")

    show.banner("4. The offline summary, and the backfill of a weak model's")
    offline = summarize_offline(middle)
    print(f"[summary] offline summarizer ({len(offline):,} chars, from {len(middle)} messages):")
    indented(offline, 12)
    if model_configured():
        print("[summary] the configured model (summarize_default falls back to offline if it fails):")
        indented(summarize_default(middle), 12)
    else:
        print("[summary] no model configured: set OPENAI_API_KEY or OPENAI_BASE_URL to see a model's summary")
    filled = backfill(answer, middle)
    added = [line for line in filled.splitlines() if line.startswith("## ") and "kept from the turns" in line]
    print(f"[backfill] the stand-in's last answer: {answer.splitlines()[-1]!r}; backfill appended {len(added)} "
          f"sections it left out: {', '.join(line[3:].split(' (')[0] for line in added)}")

    show.banner("5. How the summary goes back into the history")
    framed = summary_message(offline)
    rows = framed["content"].splitlines()
    print(f"[framing] role={framed['role']!r}, content:")
    print(textwrap.fill(rows[0], 100, initial_indent="    ", subsequent_indent="    "))
    print(f"    … the {len(rows) - 4} lines of the summary …")
    print(f"    {rows[-1]}")
    print("[framing] user, not system: a system message in the middle is refused by some providers and")
    print("[framing] would turn old notes into rules; not assistant: the model would take it as its own words")
    print(f"[lesson 03] done: {len(middle)} messages → {len(lines)} tagged lines → {len(client.requests)} pieces "
          f"for a {WINDOW:,}-token summary model; {len(offline):,}-char offline summary in a {framed['role']} message")


if __name__ == "__main__":
    main()
