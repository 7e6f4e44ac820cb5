"""Lesson 04 · The cheap summarizer and its prompt
Motto: the summarizer reads the history as a document, not as a conversation it takes part in.

The problem: lesson 02 replaced the middle with "a summary". What exactly does the summarizer see,
what is it asked for, what if the middle is larger than the summary model's own window, and how
does its answer go back into the history without being mistaken for a new instruction?

How it works:

    middle (chat dicts) ─► transcript_lines(): tagged lines; the task and the latest request are kept
      ─► transcript_chunks(): pieces that fit the summary model's window, each with those two lines
      ─► summary_request(previous, piece): [system: SECTIONS_PROMPT, user: <transcript>…</transcript>]
      ─► a cheap model, no tools, temperature 0.1 ─► summary text, folded into the next piece's request
      ─► backfill(): what the extractive pass finds and the model left out is appended
      ─► Compactor(): "(Compaction N replaced M messages, …)" first, the user's latest request below
         it (with_notes) when it left the context, all in summary_message(): a USER message framed
         as reference material; compact.ACK after it when the kept tail starts with a user message

summary_window() is the summary model's window: SUMMARY_CONTEXT_WINDOW, else CONTEXT_WINDOW. Without
a model, summarize_extractive extracts a summary (the task, what the user said, files, errors,
identifiers, progress) with regular expressions: deterministic, free, and the fallback when the model
fails: the engine (Compactor) calls every summarizer through a SummaryGuard, so an error or an empty answer
costs a summary's quality, never the history. The ladder (lesson 10) uses the same summarizer.

What changed since lesson 03: nothing in the loop; we open the `summarize` box lesson 02 called.
Try it: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) and re-run to compare the model's
summary with the offline one; set WINDOW to 3_000 for more pieces; change SEED for another conversation.
Explains compact.py Part II ("The summarizer that reads in pieces"): transcript_lines,
transcript_chunks, summary_request, SECTIONS_PROMPT, summary_window, summarize_with_model,
backfill; ("What a summary must keep"): newest_within, error_kind; ("The offline summarizer"):
summarize_extractive, extractive_items, SHARES; ("The summary message, in full"): with_notes, ACK; ("The
guard"): SummaryGuard; ("The one engine every strategy runs"): Compactor, replaced_line;
Part I ("The tutorial's sawtooth"): SUMMARY_PROMPT, summary_message.
Run: python lessons/04_summarizer.py
"""

import textwrap
from types import SimpleNamespace

import show
from compact import (ACK, SECTIONS_PROMPT, SUMMARY_PROMPT, Compactor, CompactState, SummaryGuard, backfill, content_text,
                     find_cut, is_summary, model_configured, summarize_extractive,
                     summarize_with_model, summary_window, text_tokens, transcript_chunks, transcript_lines,
                     user_requests)
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

    show.banner("2. The prompt: SUMMARY_PROMPT, then the sections (SECTIONS_PROMPT)")
    for paragraph in SECTIONS_PROMPT.splitlines():
        print(textwrap.fill(paragraph, 100, initial_indent="    ", subsequent_indent="    "))
    print(f"[prompt] SECTIONS_PROMPT starts with SUMMARY_PROMPT: {SECTIONS_PROMPT.startswith(SUMMARY_PROMPT)}")

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
    prompt = "SECTIONS_PROMPT" if request["messages"][0]["content"] == SECTIONS_PROMPT else "another prompt"
    print(f"[request] {request['messages'][0]['role']} is {prompt}; the last user part starts: "
          f"{request['messages'][1]['content'][:48]!r}")

    show.banner("4. The offline summary, and the backfill of a weak model's")
    offline = summarize_extractive(middle)
    print(f"[summary] offline summarizer ({len(offline):,} chars, from {len(middle)} messages):")
    indented(offline, 10)
    if model_configured():
        print("[summary] the configured model, through a SummaryGuard (it falls back to offline if it fails):")
        indented(SummaryGuard()(middle), 12)
    else:
        print("[summary] no model configured: set OPENAI_API_KEY or OPENAI_BASE_URL to see a model's summary")
    filled = backfill(answer, middle)
    added = [line for line in filled.splitlines() if line.startswith("## ") and "kept from the turns" in line]
    print(f"[backfill] the stand-in's last answer: {answer.splitlines()[-1]!r}; backfill appended {len(added)} "
          f"sections it left out: {', '.join(line[3:].split(' (')[0] for line in added)}")

    show.banner("5. How the summary goes back into the history")
    state = CompactState()
    out = Compactor(summarize=summarize_extractive, state=state).compact(messages)  # the sawtooth
    message = next(m for m in out if is_summary(m))
    rows = message["content"].splitlines()
    print(f"[framing] Compactor().compact({len(messages)} messages) → {len(out)}: {' · '.join(m['role'] for m in out[:4])} · …; "
          f"the summary is summary_message(...), role={message['role']!r}:")
    print(textwrap.fill(rows[0], 100, initial_indent="    ", subsequent_indent="    "))
    print(f"    {rows[2]}\n    … {len(rows) - 4} more lines of the summary …\n    {rows[-1]}")
    acked = out[2] is ACK
    print(f"[framing] its first line says what it replaced, to check against the archive (lesson 09); then "
          f"{'compact.ACK, since the kept tail starts with a user message' if acked else 'no ACK: the kept tail does not start with a user message'}")
    print("[framing] user, not system: a system message in the middle is refused by some providers and")
    print("[framing] would turn old notes into rules; not assistant: the model would take it as its own words")

    def broken(middle, focus=None):
        raise ConnectionError("the summary model is down")
    failed = CompactState()
    kept = Compactor(summarize=broken, state=failed).compact(messages)
    print(f"[fallback] a summarizer that raises: {len(messages)} → {len(kept)} messages all the same, "
          f"state.failures = {failed.failures}, last_error = {failed.last_error!r}")
    print(f"[lesson 04] done: {len(middle)} messages → {len(lines)} tagged lines → {len(client.requests)} pieces "
          f"for a {WINDOW:,}-token summary model; {len(offline):,}-char offline summary in a {message['role']} message")


if __name__ == "__main__":
    main()
