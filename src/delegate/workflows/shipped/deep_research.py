"""Deep research: plan the questions, answer them in parallel, cross-check each answer, then write one report.

Run it with `delegate workflow run deep-research --arg topic='how does auth work here?'`; copy it to change it.
args: topic (what to research), questions (how many, default 5), out (the report, default "report.md").
"""

topic = args.get("topic", "what this workspace is and how its parts fit together")
out = args.get("out", "report.md")

phase("plan")
plan = agent(
    "Plan research on: " + topic + ". List the questions whose answers together cover it, most important first.",
    label="plan",
    schema={
        "type": "object",
        "properties": {"questions": {"type": "array", "items": {"type": "string"}, "minItems": 1}},
        "required": ["questions"],
    },
)
questions = plan["result"]["questions"][: args.get("questions", 5)]

phase("research")
answers = parallel(
    [
        call(
            "Answer this question from the workspace, citing the files you used: "
            + q
            + "\nWrite the answer to research/q"
            + str(i + 1)
            + ".md.",
            label="q" + str(i + 1),
            acceptance=["file:research/q" + str(i + 1) + ".md non-empty"],
        )
        for i, q in enumerate(questions)
    ]
)

phase("cross-check")
CHECK = {
    "type": "object",
    "properties": {"holds": {"type": "boolean"}, "problems": {"type": "array", "items": {"type": "string"}}},
    "required": ["holds", "problems"],
}
answered = [i for i, a in enumerate(answers) if a is not None and a["holds"]]
checks = parallel(
    [
        call(
            "Check research/q" + str(i + 1) + ".md: does each claim hold in the files it cites? List what does not.",
            label="check q" + str(i + 1),
            schema=CHECK,
            acceptance=["file:research/q" + str(i + 1) + ".md exists"],
        )
        for i in answered
    ]
)
sound = [i for i, c in zip(answered, checks) if c is not None and c["result"]["holds"]]

phase("report")
report = agent(
    "Write a report on "
    + topic
    + " to "
    + out
    + " from these answers: "
    + ", ".join("research/q" + str(i + 1) + ".md" for i in sound)
    + ". Say which questions are left open: "
    + ", ".join(questions[i] for i in range(len(questions)) if i not in sound),
    label="report",
    acceptance=["file:" + out + " non-empty"],
)
{"questions": len(questions), "answered": len(answered), "sound": len(sound), "report": report["artifacts"]}
