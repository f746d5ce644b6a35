#!/usr/bin/env python3
"""Builds the demo model's corpus: the King James Bible (public domain), offline from Debian.

    apt-get install bible-kjv          # the `bible` program and its text (package bible-kjv-text)
    python3 tools/demo/prepare_corpus.py            # writes tools/demo/kjv.txt.gz

`bible -f` turns pretty-printing off, so every verse comes on one line prefixed by its reference
("Ge1:1 In the beginning ..."); the range Gen1:1-Rev22:21 is the whole text (31,102 verses, 66
books, 1,189 chapters). The output is plain UTF-8 (in fact ASCII) text, one chapter a paragraph:

    Genesis 1
    In the beginning God created the heaven and the earth.
    And the earth was without form, and void; ...

    Genesis 2
    ...

Chapters are separated by one blank line; no verse numbers. train_demo.py splits it by chapter
into train / validation / held-out test (see tools/demo/README.md). Deterministic: the same
package version gives the same bytes (gzip mtime is fixed at 0).
"""
import gzip
import os
import re
import subprocess
import sys

# The abbreviations `bible -f` prints, in canonical order, with the book names we write.
BOOKS = [
    ("Ge", "Genesis"), ("Exo", "Exodus"), ("Lev", "Leviticus"), ("Num", "Numbers"), ("Deu", "Deuteronomy"),
    ("Josh", "Joshua"), ("Jdgs", "Judges"), ("Ruth", "Ruth"), ("1Sm", "1 Samuel"), ("2Sm", "2 Samuel"),
    ("1Ki", "1 Kings"), ("2Ki", "2 Kings"), ("1Chr", "1 Chronicles"), ("2Chr", "2 Chronicles"), ("Ezra", "Ezra"),
    ("Neh", "Nehemiah"), ("Est", "Esther"), ("Job", "Job"), ("Psa", "Psalms"), ("Prv", "Proverbs"),
    ("Eccl", "Ecclesiastes"), ("SSol", "Song of Solomon"), ("Isa", "Isaiah"), ("Jer", "Jeremiah"),
    ("Lam", "Lamentations"), ("Eze", "Ezekiel"), ("Dan", "Daniel"), ("Hos", "Hosea"), ("Joel", "Joel"),
    ("Amos", "Amos"), ("Obad", "Obadiah"), ("Jonah", "Jonah"), ("Mic", "Micah"), ("Nahum", "Nahum"),
    ("Hab", "Habakkuk"), ("Zep", "Zephaniah"), ("Hag", "Haggai"), ("Zec", "Zechariah"), ("Mal", "Malachi"),
    ("Mat", "Matthew"), ("Mark", "Mark"), ("Luke", "Luke"), ("John", "John"), ("Acts", "Acts"),
    ("Rom", "Romans"), ("1Cor", "1 Corinthians"), ("2Cor", "2 Corinthians"), ("Gal", "Galatians"),
    ("Eph", "Ephesians"), ("Phi", "Philippians"), ("Col", "Colossians"), ("1Th", "1 Thessalonians"),
    ("2Th", "2 Thessalonians"), ("1Tim", "1 Timothy"), ("2Tim", "2 Timothy"), ("Titus", "Titus"),
    ("Phmn", "Philemon"), ("Heb", "Hebrews"), ("Jas", "James"), ("1Pet", "1 Peter"), ("2Pet", "2 Peter"),
    ("1Jn", "1 John"), ("2Jn", "2 John"), ("3Jn", "3 John"), ("Jude", "Jude"), ("Rev", "Revelation"),
]
VERSE = re.compile(r"^([1-3]?[A-Za-z]+)(\d+):(\d+) (.*)$")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "kjv.txt.gz")
    raw = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True).stdout.decode("ascii")
    names = dict(BOOKS)
    chapters = []  # (book, chapter, [verses])
    for line in raw.splitlines():
        m = VERSE.match(line.strip())
        if not m:
            raise SystemExit(f"unexpected line from bible: {line!r}")
        abbr, ch, _verse, text = m.groups()
        if abbr not in names:
            raise SystemExit(f"unknown book abbreviation {abbr!r}")
        key = (names[abbr], int(ch))
        if not chapters or chapters[-1][0] != key:
            chapters.append((key, []))
        chapters[-1][1].append(" ".join(text.split()))
    n_verses = sum(len(v) for _, v in chapters)
    if n_verses != 31102 or len(chapters) != 1189:
        raise SystemExit(f"expected 31102 verses in 1189 chapters, got {n_verses} in {len(chapters)}")
    text = "\n\n".join(f"{book} {ch}\n" + "\n".join(verses) for (book, ch), verses in chapters) + "\n"
    with open(out, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="kjv.txt") as gz:
        gz.write(text.encode("utf-8"))
    print(f"{out}: {len(chapters)} chapters, {n_verses} verses, {len(text)} characters")


if __name__ == "__main__":
    main()
