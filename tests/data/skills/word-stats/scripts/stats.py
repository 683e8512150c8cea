#!/usr/bin/env python3
"""Word, line and top-word counts of the text given as the first argument."""

import collections
import sys

text = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
words = text.lower().split()
top = collections.Counter(words).most_common(3)
print(f"words={len(words)} lines={len(text.splitlines()) or 1}")
print("top=" + ",".join(f"{w}:{n}" for w, n in top))
