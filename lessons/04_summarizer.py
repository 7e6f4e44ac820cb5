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
      ─► backfill(): the facts it left out (Files changed, Errors seen, Identifiers), under its headings
      ─► Compactor(): "(Compaction N replaced M messages, …)" first; below it (with_notes) the user's
         words the state carries (user_notes: the task, the other requests, the rules); all in
         summary_message(): a USER message framed as reference material; the latest request stays a
         message of its own, compact.ACK before it

One summary format: SECTIONS (a title and what it holds) is what the model is asked for
(SECTIONS_PROMPT is rendered from it) and what summarize_extractive writes without a model, with
regular expressions: deterministic, free, and the fallback when the model fails. The user's own
words are not a section: the state carries them verbatim (carry_user_words), so a summary that
forgets cannot lose them. summary_window() is the summary model's window: SUMMARY_CONTEXT_WINDOW,
else CONTEXT_WINDOW. The engine (Compactor) calls every summarizer through a SummaryGuard, so an
error or an empty answer costs a summary's quality, never the history; the failure is counted in
the state. The ladder (lesson 10) uses the same summarizer.

What changed since lesson 03: nothing in the loop; we open the `summarize` box lesson 02 called.
Try it: set OPENAI_API_KEY (or OPENAI_BASE_URL for a local server) and re-run to compare the model's
summary with the offline one; set WINDOW to 3_000 for more pieces; change SEED for another conversation.
Explains compact.py Part II ("The summarizer that reads in pieces"): transcript_lines,
transcript_chunks, summary_request, SECTIONS_PROMPT, summary_window, summarize_with_model,
backfill, FACTS; ("What a summary must keep"): newest_within, error_kind; ("The offline
summarizer"): SECTIONS, summarize_extractive, extractive_items, SHARES; ("The summary message"):
with_notes, replaced_line, ACK; ("The user's words"): carry_user_words, user_notes, TASK_NOTE;
("The guard"): SummaryGuard; ("The engine"): Compactor, CompactState; Part I ("The tutorial's
sawtooth"): SUMMARY_PROMPT, summary_message.
Run: python lessons/04_summarizer.py
"""

import textwrap
from types import SimpleNamespace

import show
from compact import (KEEP_RECENT, ACK, EXTRA_RULE, SECTIONS, SECTIONS_PROMPT, SUMMARY_PROMPT, Compactor, CompactState, SummaryGuard,
                     backfill, content_text, find_cut, is_summary, model_configured, parse_summary, summarize_extractive,
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
        answer = (f"## Files changed\n- src/shopfront/app.py\n\n## Progress\n"
                  f"- Fixing the stale token refresh (stand-in answer {len(self.requests)}).")
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=answer))])


def indented(text: str, lines: int, width: int = 100) -> None:
    rows = [row for row in text.splitlines() if row.strip()]
    for row in rows[:lines]:
        print("    " + (row if len(row) <= width else row[: width - 1] + "…"))
    if len(rows) > lines:
        print(f"    … {len(rows) - lines} more lines")


def tagged(middle: list[dict]) -> list:
    """Part 1: the middle as the summarizer reads it."""
    lines = transcript_lines(middle)
    print(f"[transcript] {len(middle)} chat messages → {len(lines)} tagged lines, "
          f"{sum(must for _, must in lines)} of them must be kept (the task and the latest request):")
    indented("\n".join(line.split("\n")[0] for line, _ in lines), 7)
    print("[why] as chat roles, the summarizer would take part: answer the user, obey an instruction")
    print("[why] inside a tool output, or try to continue the calls. As tagged text inside one user")
    print("[why] message it is data to describe; long outputs keep only their head and tail.")
    return lines


def prompt() -> None:
    """Part 2: SUMMARY_PROMPT, then the one summary format rendered as sections."""
    intro, _, rest = SECTIONS_PROMPT.partition("\n## ")
    for paragraph in intro.splitlines():
        print(textwrap.fill(paragraph, 100, initial_indent="    ", subsequent_indent="    "))
    print(f"    ## {rest.splitlines()[0]}\n    … {len(SECTIONS) - 1} more: " + ", ".join(list(SECTIONS)[1:]))
    print(textwrap.fill(SECTIONS_PROMPT.splitlines()[-1], 100, initial_indent="    ", subsequent_indent="    "))
    print(f"[prompt] SECTIONS_PROMPT starts with SUMMARY_PROMPT: {SECTIONS_PROMPT.startswith(SUMMARY_PROMPT)}; "
          f"its {len(SECTIONS)} sections are SECTIONS, the format summarize_extractive writes too")


def in_pieces(middle: list[dict], task: str, latest: str) -> tuple[str, StandInClient]:
    """Part 3: a middle larger than the summary model's window, read in pieces."""
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
    return answer, client


def offline_and_backfill(middle: list[dict], answer: str) -> str:
    """Part 4: the offline summary, and what backfill adds to a weak model's answer."""
    offline = summarize_extractive(middle)
    print(f"[summary] offline summarizer ({len(offline):,} chars, from {len(middle)} messages):")
    indented(offline, 6)
    if model_configured():
        print("[summary] the configured model, through a SummaryGuard (it falls back to offline if it fails):")
        indented(SummaryGuard()(middle), 12)
    else:
        print("[summary] no model configured: set OPENAI_API_KEY or OPENAI_BASE_URL to see a model's summary")
    filled, wrote = parse_summary(backfill(answer, middle)), parse_summary(answer)
    added = len(filled["Files changed"]) - len(wrote["Files changed"])
    print(f"[backfill] the stand-in's answer names 1 file changed; backfill added {added} under its own "
          f"'## Files changed' and the sections it left out: {', '.join(t for t in filled if t not in wrote)}")
    return offline


def framed(messages: list[dict]) -> dict:
    """Part 5: how the summary goes back into the history, the user's words below it."""
    out = Compactor(summarize=summarize_extractive).compact(messages)  # the sawtooth
    message = next(m for m in out if is_summary(m))
    rows = message["content"].splitlines()
    print(f"[framing] Compactor().compact({len(messages)} messages) → {len(out)}: {' · '.join(m['role'] for m in out[:4])} · …; "
          f"the summary is summary_message(...), role={message['role']!r}:")
    print(textwrap.fill(rows[0], 100, initial_indent="    ", subsequent_indent="    "))
    notes = [row for row in message["content"].split(EXTRA_RULE)[1].splitlines()[:-1] if row.strip()]
    print(f"    {rows[2]}\n    … {rows.index(EXTRA_RULE.strip()) - 3} lines of the summary, then, below a rule, "
          "what the state carries (user_notes) and what the engine adds:")
    indented("\n".join(notes), 5)
    print(f"    {rows[-1]}")
    print(f"[framing] the latest request stays a message: {content_text(out[3])[:60]!r}…, after "
          f"{'compact.ACK, since the kept tail starts with it' if out[2] is ACK else 'the summary'}")
    print("[framing] user, not system: a system message in the middle is refused by some providers and")
    print("[framing] would turn old notes into rules; not assistant: the model would take it as its own words")
    return message


def main() -> None:
    messages = generate_conversation(TURNS, seed=SEED).messages
    middle = messages[1:find_cut(messages, KEEP_RECENT, head=1)]  # what lesson 02's compact_messages would summarize
    task, latest = (content_text(m) for m in (user_requests(middle)[0], user_requests(middle)[-1]))
    show.banner("1. The middle becomes tagged lines")
    lines = tagged(middle)
    show.banner("2. The prompt: SUMMARY_PROMPT, then the sections (SECTIONS_PROMPT)")
    prompt()
    show.banner("3. A middle larger than the summary model's window")
    answer, client = in_pieces(middle, task, latest)
    show.banner("4. The offline summary, and the backfill of a weak model's")
    offline = offline_and_backfill(middle, answer)
    show.banner("5. How the summary goes back into the history")
    message = framed(messages)

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
