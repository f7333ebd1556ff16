"""Reading qfuse-bench's JSON lines, plain or xz-compressed.

bench/results/ stores its files as NAME.jsonl.xz (the text compresses about 13-fold); the docs cite
them as NAME.jsonl. read_rows accepts either name.
"""
import json
import lzma
import os


def read_rows(path):
    """The rows of PATH, or of PATH.xz where PATH itself is absent; blank lines skipped."""
    if not os.path.exists(path) and os.path.exists(path + ".xz"):
        path += ".xz"
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]
