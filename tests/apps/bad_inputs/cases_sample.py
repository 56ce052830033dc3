"""`loom sample`: its options and the checkpoint path it is given."""
from run import Case

CLASS = "sample options"


def cases(fx):
    run = fx.trained("single")
    capacity = fx.trained("single", "moe-capacity", ["--moe-experts", "2", "--moe-top-k", "1",
                                                     "--moe-capacity-factor", "1"])

    def sample(what, args, expect, checkpoint=None):
        return Case(what, ["sample", "--checkpoint", checkpoint or run, *args], expect)

    return [
        sample("--tokens 1000000000", ["--tokens", "1000000000"], r"tokens must be between 0 and 100000, got 1000000000"),
        sample("--tokens 1e9", ["--tokens", "1e9"], r"--tokens"),
        sample("--tokens -5", ["--tokens", "-5"], r"tokens must be between 0 and 100000, got -5"),
        sample("--temperature -1", ["--temperature", "-1"], r"temperature"),
        sample("--temperature nan", ["--temperature", "nan"], r"temperature"),
        sample("--temperature inf", ["--temperature", "inf"], r"temperature"),
        sample("--top-k -1", ["--top-k", "-1"], r"top_k|top-k"),
        sample("--threads 100000", ["--threads", "100000"], r"threads \(100000\) must be between 0"),
        sample("--seed abc", ["--seed", "abc"], r"--seed"),
        sample("--seed -1 (wrapped around before)", ["--seed", "-1"], r"--seed: must be an integer from 0 to"),
        sample("--seed 2^64 (clamped before)", ["--seed", "18446744073709551616"], r"--seed: must be an integer from 0 to"),
        sample("--batch with one --prompt (ignored before)", ["--prompt", "A", "--batch", "4"],
               r"--batch decodes a prompts file's requests together"),
        sample("a prompt with a character outside the vocabulary", ["--prompt", "\u00e9t\u00e9"], r"vocabulary|not in"),
        sample("a prompt of invalid UTF-8", ["--prompt", b"ab\xff".decode("utf-8", "surrogateescape")], r"UTF-8"),
        sample("no --checkpoint", [], r"--checkpoint", checkpoint=None) if False else
        Case("no --checkpoint", ["sample"], r"--checkpoint"),
        sample("a missing checkpoint", [], r"/nonexistent/ckpt", checkpoint="/nonexistent/ckpt"),
        sample("a directory without checkpoints", [], r"empty-dir", checkpoint=fx.directory("empty-dir")),
        sample("a text file as checkpoint", [], r"notckpt", checkpoint=fx.file("notckpt.txt", "hello world\n" * 10)),
        sample("an unknown option", ["--top-q", "0.9"], r"unknown argument '--top-q'"),
        sample("--precision fp16", ["--precision", "fp16"], r"precision must be 'fp32' or 'bf16', got 'fp16'"),
        # The prompt named as the input, its character as U+XXXX (hex).
        sample("a prompt with '~' (U+007E, outside the vocabulary)", ["--prompt", "ab~"],
               r"the prompt \(--prompt\): character U\+007E at byte offset 2 is not in the tokenizer's vocabulary"),
        sample("a prompts file line of invalid UTF-8", ["--prompts-file", fx.file("bad-prompts.txt", b"ROMEO:\na\xff\n")],
               r"prompts file '.*bad-prompts.txt' line 2: invalid UTF-8 at byte offset 1"),
        sample("a prompts file line with a character outside the vocabulary",
               ["--prompts-file", fx.file("wide-prompts.txt", '{"prompt": "ROMEO:"}\n{"prompt": "JULIET \\u00e9"}\n')],
               r"prompts file '.*wide-prompts.txt' line 2: character U\+00E9 at byte offset 7 is not in"),
        # A GCN's checkpoint holds a graph, not a tokenizer.
        sample("a GCN's checkpoint", ["--tokens", "4"], r"checkpoint '.*' is a GCN's \(a graph model\), not a GPT's: "
               r"loom sample, eval and generate need a GPT checkpoint", checkpoint=fx.trained_gcn()),
        Case("eval: a GCN's checkpoint", ["eval", "--checkpoint", fx.trained_gcn(), "--data", fx.data],
             r"checkpoint '.*' is a GCN's \(a graph model\), not a GPT's"),
        sample("--prompt beside --prompts-file (dropped)", ["--prompt", "A", "--prompts-file", fx.file("prompts.txt", "a\n")],
               r"--prompt and --prompts-file \(.*prompts.txt\) are two sources of prompts"),
        # loom generate's input: stdin a directory, a line no prompt could fill (kept bounded).
        Case("generate: stdin a directory", ["generate", "--checkpoint", run], r"stdin is a directory",
             stdin=fx.directory("stdin-dir")),
        Case("generate: a 3 MB request line", ["generate", "--checkpoint", run, "--input",
                                               fx.file("long-line.txt", "a" * 3_000_000 + "\n")],
             r"request 0: a line longer than 1 MiB"),
        # Both samplers refuse a prompt longer than the context; the uncached one cropped it unsaid.
        sample("--no-kv-cache: a prompt longer than the context (cropped)", ["--prompt", "a" * 17, "--no-kv-cache"],
               r"the prompt is 17 tokens, longer than the model's context of 16 tokens \(block_size\)"),
        sample("a prompts file's prompt longer than the context (no line named, after generating)",
               ["--prompts-file", fx.file("long-prompt.txt", "ab\n" + "a" * 17 + "\n")],
               r"prompts file '.*long-prompt.txt' line 2: the prompt is 17 tokens, longer than the model's context"),
        sample("a prompts file line with a key twice (the last kept)",
               ["--prompts-file", fx.file("twice.txt", '{"prompt": "a", "seed": 1, "seed": 2}\n')],
               r"prompts file '.*twice.txt' line 1: the key \"seed\" is given twice"),
        # CLI11 reads an empty number as 0.
        sample("--tokens '' (generated nothing)", ["--tokens", ""], r"--tokens: expected a number, got ''"),
        sample("--temperature '' (greedy)", ["--temperature", ""], r"--temperature: expected a number, got ''"),
        # loom generate: each refused request is answered by its id with its reason, the others go on.
        Case("generate: a request with a key twice (the last kept)",
             ["generate", "--checkpoint", run, "--input", fx.file("twice-gen.txt", 'a\n{"prompt": "a", "tokens": 1, "tokens": 99999}\n')],
             r'\{"error":"request 1: the key \\"tokens\\" is given twice","id":1\}'),
        Case("generate: an indented request with an unknown key (read as a prompt)",
             ["generate", "--checkpoint", run, "--input", fx.file("indented.txt", '  {"prompt": "a", "tokenz": 3}\n')],
             r'request 0: unknown key \\"tokenz\\"'),
        Case("generate: a prompt longer than the context (request not named)",
             ["generate", "--checkpoint", run, "--input", fx.file("long-gen.txt", "a" * 17 + "\n")],
             r"request 0: the prompt is 17 tokens, longer than the model's context of 16 tokens"),
        Case("generate: a prompt outside the vocabulary (request not named)",
             ["generate", "--checkpoint", run, "--input", fx.file("wide-gen.txt", "a\n\n  \nab~\n")],
             r"request 1: character U\+007E at byte offset 2 is not in the tokenizer's vocabulary"),
        # A mixture of experts with capacity: the cached paths name the one way to sample it, which
        # none of them takes (the message said "--no-kv-cache", a flag generate lacks and
        # --prompts-file refuses).
        Case("generate: a mixture of experts with capacity",
             ["generate", "--checkpoint", capacity, "--input", fx.file("moe-gen.txt", "a\n")],
             r"block 'blocks.0' is a mixture of experts: its experts drop tokens over capacity .*; sample it with "
             r"`loom sample --prompt TEXT --no-kv-cache` on one process .*: loom generate, --prompts-file and --tp "
             r"need the KV cache"),
        sample("--prompts-file: a mixture of experts with capacity", ["--prompts-file", fx.file("moe-prompts.txt", "a\n")],
               r"sample it with `loom sample --prompt TEXT --no-kv-cache` on one process", checkpoint=capacity),
        # The memory check names the command whose prediction it is and its batch flag (it said
        # "as `loom train --dry-run` predicts" for every command).
        sample("a batch whose KV cache cannot fit", ["--prompts-file", fx.file("prompts.txt", "a\n"), "--batch", "1000000000000"],
               r"KV cache .*, as `loom sample` predicts, .*generate fewer sequences together \(--batch\)$"),
        Case("generate: a batch whose KV cache cannot fit",
             ["generate", "--checkpoint", run, "--batch", "1000000000000", "--input", fx.file("one-gen.txt", "a\n")],
             r"KV cache .*, as `loom generate` predicts, .*generate fewer sequences together \(--batch\)$"),
        # loom eval scores --batch windows in one forward pass; its check counted one window.
        Case("eval: a batch of windows whose activations cannot fit",
             ["eval", "--checkpoint", run, "--data", fx.data, "--batch", "1000000000000"],
             r"the model of checkpoint .* needs .*activations .*, as `loom eval` predicts, .*; run it where more "
             r"memory is free, or score fewer windows at once \(--batch\)$"),
        Case("eval: --batch 0", ["eval", "--checkpoint", run, "--data", fx.data, "--batch", "0"],
             r"--batch must be >= 1, got 0"),
        # Started under mpirun without --tp: the message says which --tp, or to drop mpirun.
        Case("sample under mpirun -np 2 without --tp", ["sample", "--checkpoint", run, "--tokens", "2"],
             r"loom sample --tp 1 needs exactly 1 ranks, the job has 2 \(give --tp 2, or run it without mpirun\)",
             ranks=2, slow=True),
    ]
