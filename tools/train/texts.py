"""texts.py: what train.py and figures.py share about ../shared/data's texts
(standard library only, so figures.py runs without torch)."""


def book_body(text):
    """A Project Gutenberg file's body, between its START and END markers (other texts as they are)."""
    s = text.find("*** START OF")
    if s >= 0:
        s = text.find("\n", s) + 1
        e = text.find("*** END OF", s)
        text = text[s:e if e > 0 else len(text)]
    return text.lstrip("\ufeff").strip()
