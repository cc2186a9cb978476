#!/usr/bin/env python3
"""Replay every finding of a fuzz target and group them by what is wrong.

    fuzz/triage.py BINARY ARTIFACT_DIR

Prints, per class of wrong answer (the oracle's first complaint with its
particulars taken out), how many findings fell in it and the shortest
review that shows it.
"""
import re
import subprocess
import sys
from pathlib import Path

binary, directory = sys.argv[1], Path(sys.argv[2])
classes = {}
for artifact in sorted(directory.glob("crash-*")):
    run = subprocess.run([binary, str(artifact)], capture_output=True, text=True, timeout=60)
    text = run.stderr
    if run.returncode == 0:
        # Replays clean: fixed since it was found.
        review, what = "", "replays clean now"
    elif "WRONG ANSWER" in text:
        block = text[text.index("WRONG ANSWER"):]
        lines = block.splitlines()
        review = next((l for l in lines if l.startswith("  review: ")), "")
        what = next((l.strip() for l in lines if l.startswith("  /") or l.startswith("  not ")), lines[-1] if lines else "")
    else:
        panic = re.search(r"panicked at (.*)", text)
        review, what = "", "panic: " + (panic.group(1) if panic else text[-300:])
    key = re.sub(r"'[^']*'", "'…'", what)
    key = re.sub(r"\{.*", "", key)
    key = re.sub(r"[0-9]", "", key)[:140]
    count, example = classes.get(key, (0, None))
    shown = f"{review}\n  {what}"
    if example is None or len(shown) < len(example):
        example = shown
    classes[key] = (count + 1, example)
for key, (count, example) in sorted(classes.items(), key=lambda kv: -kv[1][0]):
    print(f"=== {count:>4}  {key}\n{example[:4000]}\n")
print(f"{len(classes)} classes in {sum(c for c, _ in classes.values())} findings")
