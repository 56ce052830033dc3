"""Tokenizer specs as checkpoints store them ('char:<alphabet>', 'byte'), read by `loom sample`."""
from run import Case

CLASS = "tokenizer spec"


def cases(fx):
    def spec(what, value, expect):
        def edit(h):
            h["__metadata__"]["tokenizer"] = value
            return h
        return Case(what, ["sample", "--checkpoint", fx.edit_checkpoint(what, edit), "--tokens", "4"], expect)

    return [
        spec("empty", "", r"tokenizer"),
        spec("unknown kind", "bpe:merges", r"tokenizer"),
        spec("char with no alphabet", "char:", r"tokenizer|alphabet|vocab"),
        spec("char with a repeated character", "char:aab", r"tokenizer|repeat|twice|duplicate"),
        spec("a lone surrogate escape in the header's JSON", "char:ab\udcff", r"corrupted header"),
        # The vocabulary sizes the model: a spec that is not the weights' is named by the embedding
        # (a smaller one by the table's own rows, before re-padding would drop the rows it lacks).
        spec("char alphabet smaller than the model's vocabulary", "char:abc",
             r"its token table has 128 rows, its own configuration and tokenizer \(char with 3 symbols\) give 64: the tokenizer or the configuration does not belong to these weights"),
        spec("byte for a 65-token model", "byte", r"'model.embedding.wte' is \(128, 16\), the model expects \(256, 16\)"),
        spec("a 20000-character alphabet", "char:" + "".join(chr(0x4E00 + i) for i in range(20000)), r"the model expects \(20032, 16\)"),
    ]
