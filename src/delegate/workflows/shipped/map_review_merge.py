"""Map, review, merge: summarise each file, have two reviewers check each summary, merge what both accept.

Run it with `delegate workflow run map-review-merge --arg pattern='docs/**/*.md'`; copy it to change it.
args: pattern (the files, default "**/*.md"), out (the merged file, default "SUMMARY.md"), limit (most files, 300).
"""

pattern = args.get("pattern", "**/*.md")
out = args.get("out", "SUMMARY.md")
files = [f for f in glob(pattern) if not f.endswith("/")][: args.get("limit", 300)]
log("summarising", len(files), "files matching", pattern)

VERDICT = {
    "type": "object",
    "properties": {"accept": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["accept", "reason"],
}


def note_of(path):
    return "notes/" + path.replace("/", "__") + ".md"


def summarise(path):
    note = note_of(path)
    return call(
        "Read " + path + " and write a summary of it (at most five lines, facts only) to " + note + ".",
        label="summarise " + path,
        phase="summarise",
        acceptance=["file:" + note + " non-empty"],
    )


def review(summary):
    path = summary["label"][len("summarise ") :]
    note = note_of(path)
    ask = "Check the summary in " + note + " against " + path + ": is every line true of the file? "
    return [
        call(
            ask + "Say accept or not, and why.",
            label="review A " + path,
            phase="review",
            schema=VERDICT,
            acceptance=["file:" + note + " exists"],
        ),
        call(
            ask + "Look for anything it leaves out that matters.",
            label="review B " + path,
            phase="review",
            schema=VERDICT,
            acceptance=["file:" + note + " exists"],
        ),
    ]


def accepted(reviews):
    return all(r is not None and r["result"]["accept"] for r in reviews)


reviewed = pipeline(files, summarise, review)
keep = [note_of(files[i]) for i, r in enumerate(reviewed) if r is not None and accepted(r)]

phase("merge")
merged = None
if keep:
    merged = agent(
        "Merge these summaries into " + out + ", one section a file, in this order: " + ", ".join(keep) + ".",
        label="merge",
        acceptance=["file:" + out + " non-empty"],
    )
{
    "files": len(files),
    "accepted": len(keep),
    "merged": merged["artifacts"] if merged else [],
}
