"""Training data (--data), and the text `loom eval` and `loom tokenize` read: what the path is, how big,
what it holds for the tokenizer."""
from run import Case

CLASS = "data"


def cases(fx):
    def train(what, data, expect, extra=()):
        return Case(what, ["train", *fx.tiny, "--data", data, "--steps", "1", *extra, *fx.out()], expect)

    return [
        train("missing file", "/nonexistent/text.txt", r"/nonexistent/text.txt"),
        train("a directory", fx.directory("datadir"), r"is a directory, not a regular file"),
        train("a FIFO (would block)", fx.fifo("data.fifo"), r"is a FIFO \(named pipe\), not a regular file"),
        train("/dev/zero (endless)", "/dev/zero", r"'/dev/zero' is a character device"),
        train("/dev/null", "/dev/null", r"'/dev/null' is a character device"),
        train("1 GiB + 1 byte (sparse)", fx.sparse("big.txt", (1 << 30) + 1), r"more than the limit of 1.0 GiB"),
        train("empty file", fx.file("empty.txt", ""), r"empty.txt"),
        train("shorter than one block", fx.file("short.txt", "hello"), r"short.txt"),
        train("one block, no room for validation", fx.file("block.txt", "abcdefghijklmnopq"), r"block.txt"),
        train("invalid UTF-8 with the char tokenizer", fx.file("latin1.txt", b"caf\xe9 " * 200), r"data file '.*latin1.txt': invalid UTF-8"),
        train("a lone continuation byte", fx.file("cont.txt", b"ab\x80cd" * 200), r"UTF-8"),
        train("a truncated 3-byte sequence at the end", fx.file("trunc.txt", b"x" * 1000 + b"\xe2\x82"), r"UTF-8"),
        train("overlong UTF-8 ('/' as 2 bytes)", fx.file("overlong.txt", b"ab\xc0\xafcd" * 200), r"UTF-8"),
        train("UTF-16 surrogate encoded in UTF-8", fx.file("surrogate.txt", b"ab\xed\xa0\x80cd" * 200), r"UTF-8"),
        train("a symbolic link loop", fx.link_loop("loop.txt"), r"symbolic link"),
        train("a dangling symbolic link", fx.symlink("dangling.txt", "/nonexistent/target"), r"dangling.txt"),
        # eval and tokenize name the file too, and print a code point as U+XXXX (hex).
        Case("eval: invalid UTF-8", ["eval", "--checkpoint", fx.trained("single"), "--data", fx.file("garbage.bin", b"a\xff\xfe\x00" * 50)],
             r"data file '.*garbage.bin': invalid UTF-8 at byte offset 1"),
        Case("eval: a character outside the vocabulary (U+20002)",
             ["eval", "--checkpoint", fx.trained("single"), "--data", fx.file("wide.txt", "abc\U00020002 def\n" * 20)],
             r"data file '.*wide.txt': character U\+20002 at byte offset 3 is not in the tokenizer's vocabulary"),
        Case("tokenize: invalid UTF-8", ["tokenize", fx.file("garbage2.bin", b"a\xff\xfe\x00" * 50), fx.path("out.tok")],
             r"text file '.*garbage2.bin': invalid UTF-8 at byte offset 1"),
    ]
