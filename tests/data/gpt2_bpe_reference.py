#!/usr/bin/env python3
"""Reference for Loom's GPT-2 tokenizer, written from GPT-2's published algorithm (encoder.py):
learns a few hundred merges on a sample text, writes them as vocab.json and merges.txt in
GPT-2's layout (ids: the 256 bytes, then one per merge, then <|endoftext|>), and encodes test
texts with them. The pre-split uses Python's `re` with GPT-2's pattern, its \\p{L}, \\p{N} and
\\s spelled out as character classes from unicodedata (the `regex` module is not needed).
Usage: gpt2_bpe_reference.py OUT_DIR   (reads OUT_DIR/texts.json, writes vocab.json, merges.txt, expected.json)
"""
import json
import os
import re
import sys
import unicodedata

WHITE_SPACE = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
               (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]


def category_ranges(prefix):
    out, start = [], None
    for cp in range(0x110000):
        inside = unicodedata.category(chr(cp)).startswith(prefix)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            out.append((start, cp - 1))
            start = None
    if start is not None:
        out.append((start, 0x10FFFF))
    return out


def char_class(ranges):
    return "".join(re.escape(chr(a)) if a == b else re.escape(chr(a)) + "-" + re.escape(chr(b)) for a, b in ranges)


_pattern = None


def pattern():
    """GPT-2's pattern, built on first use (scanning Unicode takes a second)."""
    global _pattern
    if _pattern is None:
        L, N, S = char_class(category_ranges("L")), char_class(category_ranges("N")), char_class(WHITE_SPACE)
        _pattern = re.compile(rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])|[{S}]+""")
    return _pattern


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


BYTE_ENCODER = bytes_to_unicode()  # byte -> its stand-in character, in GPT-2's id order


def pieces(text):
    return ["".join(BYTE_ENCODER[b] for b in tok.encode("utf-8")) for tok in pattern().findall(text)]


def learn_merges(text, count):
    words = {}
    for p in pieces(text):
        words[tuple(p)] = words.get(tuple(p), 0) + 1
    merges = []
    for _ in range(count):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


def bpe(token, ranks):
    word = list(token)
    while len(word) > 1:
        pairs = {(a, b) for a, b in zip(word, word[1:])}
        best = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if best not in ranks:
            break
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                out.append(word[i] + word[i + 1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        word = out
    return word


def main(out_dir):
    with open(os.path.join(out_dir, "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    sample = " ".join(texts) * 3 + " the quick brown fox jumps over the lazy dog; it's the dog's day, isn't it? 1234 5678"
    merges = learn_merges(sample, 300)
    vocab = {BYTE_ENCODER[b]: i for i, b in enumerate(BYTE_ENCODER)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(out_dir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f)  # ensure_ascii, as GPT-2's own file: non-ASCII tokens as \\u escapes
    with open(os.path.join(out_dir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    ranks = {m: i for i, m in enumerate(merges)}
    expected = [[vocab[t] for p in pieces(text) for t in bpe(p, ranks)] for text in texts]
    split = [pattern().findall(text) for text in texts]
    with open(os.path.join(out_dir, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"ids": expected, "pieces": split, "merges": len(merges)}, f)


if __name__ == "__main__":
    main(sys.argv[1])
