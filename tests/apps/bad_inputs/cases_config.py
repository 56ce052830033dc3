"""Config files (TOML, --config): the file itself, its syntax, its keys and their values."""
from run import Case

CLASS = "config file"


def cases(fx):
    def toml(what, text, expect):
        return Case(what, ["train", "--config", fx.file("bad.toml", text), "--dry-run"], expect)

    rows = [
        Case("missing file", ["train", "--config", "/nonexistent/loom.toml", "--dry-run"], "cannot open config file '/nonexistent/loom.toml'"),
        Case("a directory", ["train", "--config", fx.directory("confdir"), "--dry-run"], "is a directory, not a regular file"),
        Case("a FIFO (would block)", ["train", "--config", fx.fifo("conf.fifo"), "--dry-run"], r"is a FIFO \(named pipe\)"),
        Case("/dev/zero (endless)", ["train", "--config", "/dev/zero", "--dry-run"], "is a character device"),
        Case("/dev/urandom", ["train", "--config", "/dev/urandom", "--dry-run"], "is a character device"),
        Case("17 MiB (sparse) file", ["train", "--config", fx.sparse("big.toml", 17 << 20), "--dry-run"], "more than the limit of 16.0 MiB"),
        toml("syntax: unterminated string", "[model]\nn_layer = 'abc\n", r"bad.toml"),
        toml("syntax: missing value", "[model]\nn_layer =\n", r"bad.toml"),
        toml("syntax: unclosed table header", "[model\nn_layer = 2\n", r"bad.toml"),
        toml("syntax: duplicate key", "[model]\nn_layer = 2\nn_layer = 3\n", r"n_layer"),
        toml("syntax: duplicate table", "[model]\nn_layer = 2\n[model]\nn_head = 2\n", r"model"),
        toml("binary garbage", bytes(range(256)) * 4, r"bad.toml"),
        toml("a NUL byte in a value", b"[model]\nn_layer = 2\x00\n", r"bad.toml"),
        toml("non-ASCII between tokens", "[model]\nn_layer = 2\u00e9\n", r"bad.toml"),
        # toml++ reads a broken value's line ahead, quotes or not: the value's error, no crash
        toml("a quote after a '[' inside a value, then non-ASCII", '[parallel]\ndp =-en["""|a\u03da\n', r"bad.toml:2:7: invalid TOML"),
        toml("a '[=' then quotes inside a value, then non-ASCII", '[parallel]\ndp =-e[="""|a\u03da\n', r"bad.toml:2:7: invalid TOML"),
        toml("invalid UTF-8 in a string", b"[data]\ndata = '\xff\xfe'\n", r"bad.toml"),
        toml("UTF-8 BOM then garbage", b"\xef\xbb\xbf[[[[", r"bad.toml"),
        toml("arrays nested 100000 deep", "[model]\nn_layer = " + "[" * 100000 + "]" * 100000 + "\n", r"bad.toml"),
        toml("inline tables nested 100000 deep", "x = " + "{a=" * 100000 + "1" + "}" * 100000 + "\n", r"bad.toml"),
        toml("a 4 MiB key", "[model]\n" + "k" * (4 << 20) + " = 1\n", r"unknown key|bad.toml"),
        toml("unknown section", "[modle]\nn_layer = 2\n", r"unknown section \[modle\].*did you mean"),
        toml("unknown key (typo)", "[model]\nn_layers = 2\n", r"n_layers.*did you mean 'n_layer'"),
        toml("key in the wrong section", "[train]\nn_layer = 2\n", r"n_layer"),
        toml("key outside any section", "n_layer = 2\n", r"n_layer"),
        toml("section that is a value", "model = 3\n", r"'model' must be a table"),
        toml("integer key given a string", "[model]\nn_layer = 'six'\n", r"n_layer must be an integer"),
        toml("integer key given a float", "[model]\nn_layer = 1.5\n", r"n_layer must be an integer"),
        toml("integer key given a bool", "[train]\nsteps = true\n", r"steps must be an integer"),
        toml("integer key given an array", "[train]\nsteps = [1, 2]\n", r"steps must be an integer"),
        toml("string key given an integer", "[data]\ntokenizer = 3\n", r"tokenizer must be a string"),
        toml("bool key given a string", "[model]\nrecompute = 'yes'\n", r"recompute must be a boolean"),
        toml("number key given a date", "[optim]\nlr = 1979-05-27\n", r"lr must be a number"),
        toml("integer beyond 64 bits", "[train]\nsteps = 99999999999999999999\n", r"bad.toml"),
        toml("lr = nan", "[optim]\nlr = nan\n", r"lr"),
        toml("lr = inf", "[optim]\nlr = inf\n", r"lr"),
        toml("grad_clip = -inf", "[optim]\ngrad_clip = -inf\n", r"grad_clip"),
        toml("bucket_mb = inf", "[parallel]\nbucket_mb = inf\n", r"bucket_mb"),
        toml("comm_timeout = inf", "[parallel]\ncomm_timeout = inf\n", r"comm_timeout"),
        toml("comm_timeout = -1", "[parallel]\ncomm_timeout = -1\n", r"comm_timeout must be seconds >= 0"),
        toml("weight_decay = -1", "[optim]\nweight_decay = -1.0\n", r"weight_decay"),
        toml("momentum = 2", "[optim]\nmomentum = 2.0\n", r"momentum"),
        toml("val_fraction = 1.5", "[data]\nval_fraction = 1.5\n", r"val_fraction"),
        toml("val_fraction = -0.1", "[data]\nval_fraction = -0.1\n", r"val_fraction"),
        toml("n_head does not divide n_embd", "[model]\nn_head = 5\nn_embd = 16\n", r"n_head"),
        toml("n_layer = 0", "[model]\nn_layer = 0\n", r"n_layer"),
        toml("block_size = -1", "[model]\nblock_size = -1\n", r"block_size"),
        toml("batch_size = 0", "[train]\nbatch_size = 0\n", r"batch_size must be >= 1"),
        toml("zero = 7", "[parallel]\nzero = 7\n", r"zero must be 0, 1, 2 or 3"),
        toml("schedule unknown", "[parallel]\nschedule = 'zigzag'\n", r"schedule must be"),
        toml("on_nan unknown", "[train]\non_nan = 'ignore'\n", r"on_nan must be"),
        toml("checkpoint_every = -1", "[run]\ncheckpoint_every = -1\n", r"checkpoint_every"),
        toml("keep_checkpoints = 0", "[run]\nkeep_checkpoints = 0\n", r"keep_checkpoints"),
        toml("resume = auto with overwrite", "[run]\nresume = 'auto'\noverwrite = true\n", r"overwrite"),
    ]
    return rows
