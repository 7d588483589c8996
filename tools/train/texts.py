"""texts.py: what train.py, figures.py and tests/test_trained_cli.sh share
about ../shared/data's texts (standard library only, so figures.py runs
without torch)."""
import re


def book_body(text):
    """A Project Gutenberg file's body, between its START and END markers (other texts as they are)."""
    s = text.find("*** START OF")
    if s >= 0:
        s = text.find("\n", s) + 1
        e = text.find("*** END OF", s)
        text = text[s:e if e > 0 else len(text)]
    return text.lstrip("\ufeff").strip()


def book_story(text):
    """The body from its first chapter on: a book whose contents list the chapters (Dracula's title page,
    contents and list of illustrations are about 3,900 tokens of runs of spaces and headings) starts at the
    second line that reads as its first chapter heading; other texts are their body."""
    body = book_body(text)
    m = re.search(r"^[ \t]*(CHAPTER I\.?|Chapter 1\.?|CHAPTER 1\.?)[ \t]*$", body, re.M)
    if m:
        again = re.search(r"^[ \t]*" + re.escape(m.group(1)) + r"[ \t]*$", body[m.end():], re.M)
        if again:
            return body[m.end() + again.start():].strip()
    return body


if __name__ == "__main__":
    import sys
    if len(sys.argv) != 2:
        sys.exit("usage: texts.py BOOK.txt  (writes the book's text from its first chapter on to stdout)")
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(book_story(f.read()))
