"""Checked summaries: one short summary per document, each checked in code, the failures tried again.

`delegate demo` runs this plan: the model writes one summary at a time (all a small model can do),
and the plan, the checks and the retries are this script's.
args: docs (the documents' paths), out (the summaries' folder, default "summaries"), type (the
subagent type, default "general-purpose"), attempts (tries a summary gets in all, default 3), ask
(what each agent is asked after the document's text, "{path}" the file to write), and the checks'
bounds: min_shared (5), min_words (12), max_share (0.6), echo (6).
A retry writes a file of its own (`summaries/NAME-try2.md`): the value names, for each document,
the file of its last try, whether it holds and what is wrong with it.
"""

import re

docs = args["docs"]
out = args.get("out", "summaries")
kind = args.get("type", "general-purpose")
attempts = args.get("attempts", 3)
MIN_SHARED = args.get("min_shared", 5)
MIN_WORDS = args.get("min_words", 12)
MAX_SHARE = args.get("max_share", 0.6)
ECHO = args.get("echo", 6)
COMMON = set(
    "about after also been before being between both could does doing down each even from have here "
    "into just like made make many more most much must only other over same should some such than that "
    "their them then there these they this those through under very were what when where which while "
    "will with would your".split()
)


def words(text):
    return re.findall("[a-z0-9]+", text.lower())


def content(text):
    return set([w[:-1] if w.endswith("s") else w for w in words(text) if len(w) >= 4 and w not in COMMON])


def longest_run(text, source):
    mine, theirs = words(text), words(source)
    best = 0
    previous = [0] * (len(theirs) + 1)
    for word in mine:
        current = [0] * (len(theirs) + 1)
        for j in range(len(theirs)):
            if word == theirs[j]:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def stem(path):
    return path.split("/")[-1].rsplit(".", 1)[0]


texts = {d: read(d) for d in docs}
vocab = {d: content(texts[d]) for d in docs}


def target(doc, attempt):
    return out + "/" + stem(doc) + ("" if attempt == 1 else "-try" + str(attempt)) + ".md"


ASK = args.get("ask", "Sum up the text above in two sentences, at most 40 words, into {path}.")
HINTS = {"names": "Use the text's own key words.", "about": "Use the text's own key words.",
         "copies": "Do not repeat these instructions.", "long": "Write at most 40 words.", "short": "Write two full sentences."}


def ask(doc, attempt):
    return ASK.replace("{path}", target(doc, attempt))


def hints(why):
    said = []
    for problem in why:
        for key in HINTS:
            if key in problem and HINTS[key] not in said:
                said.append(HINTS[key])
    return said


def problems(doc, attempt, summary):
    """What is wrong with `summary` as a summary of `doc` (nothing: it holds)."""
    if summary is None or not summary.strip():
        return ["not written"]
    found = []
    mine = content(summary)
    shared = {d: len(mine & vocab[d]) for d in docs}
    if shared[doc] < MIN_SHARED:
        found.append("it names " + str(shared[doc]) + " of the text's words; name at least " + str(MIN_SHARED))
    for d in docs:
        if d != doc and shared[d] > shared[doc] and shared[d] >= MIN_SHARED:
            found.append("it is more about " + d + " than about this text")
    if longest_run(summary, ask(doc, attempt)) >= ECHO:
        found.append("it copies the task")
    count, whole = len(words(summary)), len(words(texts[doc]))
    if count < MIN_WORDS:
        found.append("it has " + str(count) + " words: too short")
    elif count > MAX_SHARE * whole:
        found.append("it has " + str(count) + " words: too long, at most 40")
    return found


def written(path):
    try:
        return read(path)
    except Exception:
        return None


def summarise(doc, attempt, why):
    again = "" if not why else " " + " ".join(hints(why))
    return call(
        texts[doc] + "\n\n" + ask(doc, attempt) + again,
        type=kind,
        label=stem(doc) if attempt == 1 else stem(doc) + " (try " + str(attempt) + ")",
    )


verdicts = {}
files = {}
todo = list(docs)
for attempt in range(1, attempts + 1):
    if not todo:
        break
    phase("summarise" if attempt == 1 else "retry " + str(attempt - 1))
    parallel([summarise(d, attempt, verdicts.get(d)) for d in todo])
    for d in todo:
        files[d] = target(d, attempt)
        verdicts[d] = problems(d, attempt, written(files[d]))
    todo = [d for d in todo if verdicts[d]]
    if todo:
        log(str(len(todo)) + " summaries do not hold: " + ", ".join([stem(d) for d in todo]))

{stem(d): {"file": files[d], "holds": not verdicts[d], "problems": verdicts[d]} for d in docs}
