"""Token files (`loom tokenize` output) as `loom train --data` reads them: header, tokenizer
spec and ids. Layout: magic "LOOMTOKS", version (u32), bytes per id (u32), count (u64), spec
length (u64), the spec padded to 8 bytes, then the ids."""
import struct

from run import Case

CLASS = "token file"

SPEC = b"char:abcdefgh"  # 8 ids


def token_file(magic=b"LOOMTOKS", version=1, width=2, count=None, spec=SPEC, spec_len=None, ids=None, cut=None, tail=b""):
    ids = list(range(8)) * 40 if ids is None else ids
    body = b"".join(i.to_bytes(width if width in (2, 4) else 2, "little") for i in ids)
    header = magic + struct.pack("<IIQQ", version, width, len(ids) if count is None else count,
                                 len(spec) if spec_len is None else spec_len)
    data = header + spec + b"\0" * (-len(spec) % 8) + body + tail
    return data if cut is None else data[:cut]


def cases(fx):
    def train(what, content, expect):
        data = fx.file("tokens.bin", content)
        return Case(what, ["train", *fx.tiny, "--data", data, "--steps", "1", *fx.out()], expect)

    big = 1 << 62
    return [
        train("only the magic", b"LOOMTOKS", r"token file '.*' is truncated inside its header"),
        train("the header cut at 20 bytes", token_file(cut=20), r"truncated inside its header"),
        train("the ids cut short", token_file(cut=32 + 16 + 100), r"is truncated: its header counts 320 tokens, the file holds 50"),
        train("the spec cut short", token_file(cut=32 + 5), r"truncated inside its tokenizer spec"),
        train("bytes after the ids", token_file(tail=b"\0\0"), r"has 2 bytes after its 320 tokens"),
        train("a count of 2^62", token_file(count=big), r"is truncated: its header counts 4611686018427387904 tokens"),
        train("format version 2", token_file(version=2), r"has format version 2; this Loom reads version 1"),
        train("format version 0", token_file(version=0), r"has format version 0"),
        train("3 bytes per id", token_file(width=3), r"has 3 bytes per token id \(2 or 4 expected\)"),
        train("0 bytes per id", token_file(width=0), r"has 0 bytes per token id"),
        train("a spec length of 0", token_file(spec=b"", spec_len=0), r"has a tokenizer spec of 0 bytes"),
        train("a spec length of 2^62", token_file(spec_len=big), r"has a tokenizer spec of 4611686018427387904 bytes"),
        train("a spec length past the file's end", token_file(spec_len=900), r"has a tokenizer spec of 900 bytes|truncated inside its tokenizer spec"),
        train("an unknown tokenizer spec", token_file(spec=b"bpe:xyz"), r"records a tokenizer Loom cannot read"),
        train("a char spec with a repeated character", token_file(spec=b"char:aab"), r"records a tokenizer Loom cannot read"),
        train("an id outside the vocabulary (u16)", token_file(ids=[0, 1, 2, 9] * 80), r"is id 9, outside its tokenizer's 8 ids"),
        train("an id outside the vocabulary (u32 0xffffffff)", token_file(width=4, ids=[0, 1] * 100 + [0xFFFFFFFF] * 40),
              r"is id 4294967295, outside its tokenizer's 8 ids"),
        # Checked when the file is opened, wherever the id lies: one batch of one step reads few.
        train("an id outside the vocabulary, the last of 321", token_file(ids=list(range(8)) * 40 + [9]),
              r"token file '.*tokens.bin': token 320 \(byte offset 688\) is id 9, outside its tokenizer's 8 ids"),
        train("an id outside the vocabulary (u16 65535) in the middle", token_file(ids=[1] * 150 + [65535] + [2] * 150),
              r"token file '.*tokens.bin': token 150 \(byte offset 348\) is id 65535"),
        Case("eval: an id outside the vocabulary", ["eval", "--checkpoint", fx.trained("single"), "--data",
                                                    fx.file("eval.tok", token_file(ids=list(range(8)) * 40 + [9]))],
             r"token file '.*eval.tok': token 320 \(byte offset 688\) is id 9"),
        # `loom tokenize --tokenizer char` of another text: another alphabet, and the remedy is the text.
        Case("eval: a char token file of another text", ["eval", "--checkpoint", fx.trained("single"), "--data",
                                                         fx.file("other.tok", token_file())],
             r"token file '.*other.tok' was made with a char tokenizer other than the checkpoint's char tokenizer: its "
             r"ids mean other tokens \(give --data the text file itself: a char tokenizer is the alphabet of the text"),
        train("no ids (count 0)", token_file(ids=[]), r"data file '.*tokens.bin' is too short: its train split has 0 tokens"),
        train("a damaged magic ('LOOMTOKZ')", token_file(magic=b"LOOMTOKZ"), r"'.*tokens.bin' is not a Loom token file \(it does not start with LOOMTOKS\)"),
        train("7 bytes of magic only", b"LOOMTOK", r"'.*tokens.bin' is not a Loom token file"),
    ]
