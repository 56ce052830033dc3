"""The other commands' inputs: plan, schedule, report, verify, convert, bench."""
import os

from run import Case

CLASS = "other commands"


def cases(fx):
    plan = ["plan", "--cluster", "dgx-a100", "--gpus", "8", "--global-batch", "8"]
    garbage_toml = fx.file("garbage.toml", "[model\nlayers = ")
    metrics = fx.directory("bad-metrics")
    open(metrics + "/metrics.jsonl", "w").write('{"step": 1, "loss": \n{{{not json\n')
    fifo_metrics = fx.directory("fifo-metrics")
    os.mkfifo(fifo_metrics + "/metrics.jsonl")

    def run_dir(name, metrics_lines, memory=None, trace=None):
        """A run directory for `loom report` holding these files (JSON text)."""
        d = fx.directory(name)
        open(d + "/metrics.jsonl", "w").write("".join(l + "\n" for l in metrics_lines))
        if memory is not None:
            open(d + "/memory.json", "w").write(memory)
        if trace is not None:
            open(d + "/trace.json", "w").write(trace)
        return d

    good = '{"kind": "train", "step": 1, "loss": 4.1, "tokens_per_s": 100.0, "mfu": 0.1}'

    def memory_rank(rank):  # memory.json with one rank entry whose "rank" is this JSON text
        return '{"ranks": [{"rank": %s, "current": {}, "peak": {}, "formula": {}}]}' % rank

    def pipeline_trace(pid="0", tid="0", mb="0", chunk="0", stage="0"):  # one stage, one forward in its step
        return ('{"traceEvents": [{"ph": "M", "pid": 0, "tid": 0, "name": "process_name", "args": {"name": "rank 0 (dp 0, pp %s, tp 0)"}},'
                ' {"ph": "X", "pid": %s, "tid": %s, "cat": "step", "name": "step", "ts": 0, "dur": 100},'
                ' {"ph": "X", "pid": 0, "tid": 0, "cat": "pipeline", "name": "F", "ts": 10, "dur": 10, "args": {"mb": %s, "chunk": %s}}]}'
                % (stage, pid, tid, mb, chunk))
    deep = "[" * 100000 + "]" * 100000
    huge_trace = run_dir("huge-trace", [good])  # a 300 MiB trace.json (sparse): read whole, it would need GBs
    with open(huge_trace + "/trace.json", "wb") as f:
        f.truncate(300 << 20)
    html_dir = run_dir("html-dir", [good])
    os.makedirs(html_dir + "/report.html")
    one_layout = [*plan, "--model", "gpt2-small", "--dp", "8"]

    def bench_train(**given):  # the tiny model, with the given flags in place of its own
        flags = {"n_layer": 1, "n_embd": 32, "n_head": 2, "block_size": 16, "batch_size": 2, "threads": 1, "steps": 1, **given}
        return ["bench", "train", *[a for k, v in flags.items() for a in ("--" + k.replace("_", "-"), str(v))]]

    graph = fx.path("graph12")  # 12 nodes in Loom's text format: a ring, two features, two classes
    open(graph + ".features", "w").write("".join(f"{i % 2} {1 - i % 2}\n" for i in range(12)))
    open(graph + ".labels", "w").write("".join(f"{i % 2} {['train', 'val', 'test'][i % 3]}\n" for i in range(12)))
    open(graph + ".edges", "w").write("".join(f"{i} {(i + 1) % 12}\n" for i in range(12)))
    return [
        Case("unknown command (typo)", ["trian"], r"unknown command 'loom trian' \(did you mean 'train'\?\)"),
        Case("bench: unknown benchmark", ["bench", "gem"], r"unknown command 'loom bench gem'"),
        Case("plan: unknown model preset", [*plan, "--model", "gpt5"], r"unknown model 'gpt5'"),
        Case("plan: --tp without --dp (was ignored)", [*plan, "--model", "gpt2-small", "--tp", "2"],
             r"--tp sets a degree of the one layout to price: give --dp too"),
        Case("plan: a grid with 1D tensor parallelism", [*plan, "--model", "gpt2-small", "--dp", "1", "--tp-3d", "2,2,1",
                                                          "--tp", "2"],
             r"--tp-3d R,C,D and --tp \(2\) are two tensor-parallel layouts: give one"),
        Case("plan: a pipeline of grids not the world", [*plan, "--model", "gpt2-small", "--dp", "1", "--pp", "4",
                                                          "--tp-3d", "2,2,1"],
             r"dp \(1\) x pp \(4\) x tp \(1\) x tp_3d \(2,2,1\) = 16 != --gpus 8"),
        Case("plan: --cp-from-seq 0", [*plan, "--model", "gpt2-small", "--cp-from-seq", "0"],
             r"--cp-from-seq must be >= 1, got 0"),
        Case("plan: unknown cluster preset", ["plan", "--model", "gpt2-small", "--cluster", "tpu", "--gpus", "8",
                                              "--global-batch", "8"], r"tpu"),
        Case("plan: model file missing", [*plan, "--model-file", "/nonexistent/m.toml"], r"/nonexistent/m.toml"),
        Case("plan: model file not TOML", [*plan, "--model-file", garbage_toml], r"garbage.toml"),
        Case("plan: model file a FIFO", [*plan, "--model-file", fx.fifo("model.fifo")], r"description file '.*model.fifo' is a FIFO"),
        Case("plan: cluster file a directory", ["plan", "--model", "gpt2-small", "--cluster-file", fx.directory("cl"),
                                                "--gpus", "8", "--global-batch", "8"], r"description file '.*-cl' is a directory"),
        Case("plan: 0 devices", ["plan", "--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "0", "--global-batch", "8"],
             r"gpus|devices"),
        Case("plan: global batch -8", ["plan", "--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8",
                                       "--global-batch", "-8"], r"global.batch"),
        Case("plan: tp 3 of 12 heads x 8 devices", ["plan", "--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8",
                                                    "--global-batch", "8", "--dp", "1", "--tp", "3"], r"tp|devices"),
        Case("plan: link bandwidth -1", ["plan", "--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8",
                                         "--global-batch", "8", "--link-gbs", "-1"], r"--link-gbs must be >= 0"),
        Case("plan: emulated network -1", ["plan", "--model", "gpt2-small", "--cluster", "dgx-a100", "--gpus", "8",
                                            "--global-batch", "8", "--net-gbps", "-1"], r"--net-gbps must be >= 0"),
        Case("plan: MoE capacity factor -1", [*plan, "--model", "gpt2-small", "--moe-experts", "8",
                                               "--moe-capacity-factor", "-1"], r"--moe-capacity-factor must be >= 0"),
        Case("plan: MoE rank imbalance 0.5", [*plan, "--model", "gpt2-small", "--moe-experts", "8",
                                               "--moe-rank-imbalance", "0.5"], r"--moe-rank-imbalance must be >= 1"),
        Case("plan: hidden dropout 1", [*plan, "--model", "gpt2-small", "--hidden-dropout", "1"],
             r"--hidden-dropout must be in \[0, 1\), got 1"),
        Case("plan: selective recompute 'yes'", [*plan, "--model", "gpt2-small", "--selective-recompute", "yes"],
             r"--selective-recompute: yes not in \{on,off,any\}"),
        Case("plan: --chunks 0 (divided by zero)", [*one_layout, "--chunks", "0"], r"--chunks must be >= 1, got 0"),
        Case("plan: --dp 4 --pp 2 --chunks 0", [*plan, "--model", "gpt2-small", "--dp", "4", "--pp", "2", "--chunks", "0"],
             r"--chunks must be >= 1, got 0"),
        Case("plan: --chunks -1", [*one_layout, "--chunks", "-1"], r"--chunks must be >= 1, got -1"),
        # A size given as 0 or less (it used to mean "not given"): the model's sizes and --top
        # on the search, the one layout's degrees with --dp.
        *[Case(f"plan: {flag} {value}", [*(one_layout if layout else plan), flag, value],
               rf"{flag} must be >= 1, got {value}")
          for flag, value, layout in [("--layers", "0", False), ("--heads", "0", False), ("--hidden", "-1", False),
                                      ("--seq", "0", False), ("--vocab", "0", False), ("--dp", "0", False),
                                      ("--dp", "-8", False), ("--tp", "0", True), ("--pp", "0", True),
                                      ("--cp", "-2", True), ("--micro-batch-size", "-1", True), ("--top", "-1", False)]],
        Case("schedule: pp 0", ["schedule", "--pp", "0", "--micro-batches", "2"], r"pp\(0\)"),
        Case("schedule: pp 100000 x 100000 micro-batches (24 GB)", ["schedule", "--pp", "100000", "--micro-batches", "100000"],
             r"--pp \(100000\) x --micro-batches \(100000\) x --chunks \(1\) is above 1048576"),
        Case("schedule: pp 5000 x 5000 micro-batches (minutes)", ["schedule", "--pp", "5000", "--micro-batches", "5000"],
             r"--pp \(5000\) x --micro-batches \(5000\) x --chunks \(1\) is above 1048576"),
        Case("schedule: 1024 x 1024 x 2 chunks", ["schedule", "--schedule", "interleaved", "--pp", "1024", "--micro-batches",
                                                  "1024", "--chunks", "2"], r"--chunks \(2\) is above 1048576"),
        Case("schedule: interleaved with --chunks 1", ["schedule", "--schedule", "interleaved", "--chunks", "1"],
             r"--schedule interleaved needs --chunks >= 2 .*got 1"),
        Case("schedule: unknown schedule", ["schedule", "--pp", "2", "--micro-batches", "2", "--schedule", "zigzag"], r"zigzag"),
        Case("schedule: file missing", ["schedule", "--file", "/nonexistent/s.txt"], r"/nonexistent/s.txt"),
        Case("schedule: file garbage", ["schedule", "--file", fx.file("garbage.sched", "X9 Q1\n\x00\xff")], r"garbage.sched|X9"),
        Case("schedule: file a FIFO", ["schedule", "--file", fx.fifo("sched.fifo")], r"schedule file '.*sched.fifo' is a FIFO"),
        Case("schedule: file with a deadlock", ["schedule", "--file", fx.file("deadlock.sched", "B0 F0\nF0 B0\n")], r"deadlock|B0|order|before"),
        Case("schedule: svg into a missing directory", ["schedule", "--pp", "2", "--micro-batches", "2", "--svg",
                                                        "/nonexistent/dir/s.svg"], r"/nonexistent/dir/s.svg"),
        Case("report: missing directory", ["report", "/nonexistent/run"], r"no metrics.jsonl in '/nonexistent/run'"),
        Case("report: metrics.jsonl not JSON", ["report", metrics], r"metrics.jsonl line 1 is not JSON"),
        Case("report: trace.json of 300 MiB", ["report", huge_trace],
             r"run file '.*trace.json' is 300 MiB, more than the 256 MiB loom report reads"),
        Case("report: metrics.jsonl a FIFO", ["report", fifo_metrics], r"metrics file '.*metrics.jsonl' is a FIFO"),
        Case("report: metrics.jsonl loss a string", ["report", run_dir("m-type", [good, '{"kind": "train", "step": 2, "loss": "abc"}'])],
             r"metrics.jsonl line 2: field 'loss' must be a number \(or null\), got \"abc\""),
        Case("report: metrics.jsonl step a string", ["report", run_dir("m-step", ['{"kind": "val", "step": "5", "val_loss": 3.0}'])],
             r"metrics.jsonl line 1: field 'step' must be a number, got \"5\""),
        Case("report: metrics.jsonl a train record without a step", ["report", run_dir("m-nostep", [good, '{"kind": "train", "loss": 3.0}'])],
             r"metrics.jsonl line 2: a train record without a 'step'"),
        Case("report: metrics.jsonl a record that is not an object", ["report", run_dir("m-array", [good, "[1, 2]"])],
             r"metrics.jsonl line 2: expected a JSON object"),
        Case("report: metrics.jsonl moe_load not numbers", ["report", run_dir("m-moe", ['{"kind": "train", "step": 1, "moe_load": ["x"]}'])],
             r"metrics.jsonl line 1: field 'moe_load' must be an array of numbers"),
        Case("report: memory.json a rank's number a string",
             ["report", run_dir("mem-type", [good], memory=memory_rank('"zero"'))],
             r"memory.json: ranks\[0\]: field 'rank' must be an integer from 0 to 2147483647, got \"zero\"$"),
        Case("report: memory.json an array", ["report", run_dir("mem-array", [good], memory="[]")],
             r"memory.json: a field is missing or has the wrong type"),
        Case("report: trace.json an event's ts a string",
             ["report", run_dir("trace-type", [good], trace='{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": "soon", "dur": 1}]}')],
             r"trace.json: a field is missing or has the wrong type"),
        Case("report: trace.json otherData a number", ["report", run_dir("trace-other", [good], trace='{"otherData": 5, "traceEvents": []}')],
             r"trace.json: a field is missing or has the wrong type"),
        Case("verify: dp 2 without mpirun", ["verify", "--dp", "2"], r"needs 2 processes"),
        Case("verify: missing data", ["verify", "--data", "/nonexistent/d.txt"], r"/nonexistent/d.txt"),
        Case("verify: --grad-rtol inf (passes anything)", ["verify", "--grad-rtol", "inf"], r"--grad-rtol must be a finite number > 0, got inf"),
        Case("verify: --loss-rtol -1", ["verify", "--loss-rtol", "-1"], r"--loss-rtol must be a finite number > 0, got -1"),
        Case("verify: --loss-rtol nan", ["verify", "--loss-rtol", "nan"], r"--loss-rtol must be a finite number > 0, got nan"),
        Case("verify: --param-rtol 0", ["verify", "--param-rtol", "0"], r"--param-rtol must be a finite number > 0, got 0"),
        Case("verify: --norm-rtol 0", ["verify", "--norm-rtol", "0"], r"--norm-rtol must be a finite number > 0, got 0"),
        Case("verify: --steps 0 (compares nothing)", ["verify", "--steps", "0"], r"--steps must be >= 1 .*got 0"),
        Case("verify: --inject-gradient-error nan", ["verify", "--inject-gradient-error", "nan"],
             r"--inject-gradient-error must be a finite number within \[-1, 1\].*got nan"),
        Case("verify: --inject-gradient-error inf", ["verify", "--inject-gradient-error", "inf"],
             r"--inject-gradient-error must be a finite number within \[-1, 1\].*got inf"),
        Case("verify: --inject-gradient-error -inf", ["verify", "--inject-gradient-error", "-inf"],
             r"--inject-gradient-error must be a finite number within \[-1, 1\].*got -inf"),
        Case("verify: --inject-gradient-error 1e39 (past float)", ["verify", "--inject-gradient-error", "1e39"],
             r"--inject-gradient-error must be a finite number within \[-1, 1\].*got 1e\+39"),
        Case("verify: --inject-gradient-error -2 (a flipped gradient)", ["verify", "--inject-gradient-error", "-2"],
             r"--inject-gradient-error must be a finite number within \[-1, 1\].*got -2"),
        Case("convert: no --from", ["convert", "--to", fx.path("c")], r"--from"),
        Case("convert: --to-gpt2 with --to too", ["convert", "--from", fx.trained("single"), "--to", fx.path("c2"),
             "--to-gpt2", fx.path("g2")], r"--to-gpt2 DIR writes the checkpoint given by --from \(and no --to\)"),
        Case("convert: --to-gpt2 into a run directory", ["convert", "--from", fx.trained("sharded"), "--to-gpt2",
             fx.trained("single")], r"exists: export into a new or empty directory"),
        Case("convert: --tp 0", ["convert", "--from", fx.trained("sharded"), "--to", fx.path("conv"), "--tp", "0"], r"tp"),
        Case("convert: --dp -1", ["convert", "--from", fx.trained("sharded"), "--to", fx.path("conv"), "--dp", "-1"],
             r"--dp must be >= 1, got -1"),
        Case("convert: --dp -1 --pp -1 to one file", ["convert", "--from", fx.trained("sharded"), "--to",
                                                      fx.path("conv.safetensors"), "--dp", "-1", "--pp", "-1"],
             r"--dp must be >= 1, got -1"),
        Case("convert: --ep 0", ["convert", "--from", fx.trained("sharded"), "--to", fx.path("conv"), "--ep", "0"],
             r"--ep must be >= 1, got 0"),
        Case("convert: --cp 2 to one file", ["convert", "--from", fx.trained("sharded"), "--to",
                                             fx.path("conv.safetensors"), "--cp", "2"],
             r"converting to one file takes no layout; write a directory for dp\(1\) x pp\(1\) x cp\(2\) x tp\(1\)"),
        Case("convert: into another run's directory", ["convert", "--from", fx.trained("sharded"), "--to", fx.trained("single")],
             r"--to '.*run-single' already holds a run \(checkpoint-.* more\): convert into a run directory that holds none"),
        Case("bench train: --batch-size 0 (divided by zero)", bench_train(batch_size=0),
             r"--batch-size must be >= 1, got 0"),
        Case("bench train: --steps -1", bench_train(steps=-1), r"--steps must be >= 1 .*got -1"),
        Case("bench train: --warmup -1", bench_train(warmup=-1), r"--warmup must be >= 0, got -1"),
        Case("bench train: --n-embd 0", bench_train(n_embd=0), r"n_embd must be >= 1, got 0"),
        Case("bench spmm: --widths -4", ["bench", "spmm", "--data", graph, "--widths", "-4"],
             r"--widths must be between 1 and 1048576, got -4"),
        Case("bench spmm: --widths 16,0", ["bench", "spmm", "--data", graph, "--widths", "16,0"],
             r"--widths must be between 1 and 1048576, got 0"),
        Case("bench graph-balance: --ranks 1000000 on 12 nodes", ["bench", "graph-balance", "--data", graph, "--ranks", "1000000"],
             r"--ranks 1000000 is more ranks than .*graph12 has nodes \(12\)"),
        Case("bench graph-balance: --layers 1000000000", ["bench", "graph-balance", "--data", graph, "--layers", "1000000000"],
             r"--layers must be <= 64 .*got 1000000000"),
        # Values nested 100,000 deep: the message describes them (dumping one recursed off the stack).
        Case("report: metrics.jsonl a line of 100000 nested arrays (crashed)", ["report", run_dir("m-deep", [deep])],
             r"metrics.jsonl line 1: expected a JSON object, got an array$"),
        Case("report: metrics.jsonl loss 100000 nested arrays (crashed)",
             ["report", run_dir("m-deep-loss", [good, '{"kind":"train","step":2,"loss":' + deep + '}'])],
             r"metrics.jsonl line 2: field 'loss' must be a number \(or null\), got an array$"),
        Case("report: metrics.jsonl loss 5000 nested arrays", ["report", run_dir("m-deep-5000", ['{"kind":"train","step":1,"loss":' + "[" * 5000 + "]" * 5000 + '}'])],
             r"metrics.jsonl line 1: field 'loss' must be a number \(or null\), got an array$"),
        Case("report: metrics.jsonl moe_load holding 100000 nested arrays",
             ["report", run_dir("m-deep-moe", ['{"kind":"train","step":1,"moe_load":[1,' + deep + ']}'])],
             r"metrics.jsonl line 1: field 'moe_load' must be an array of numbers, got an array$"),
        Case("report: metrics.jsonl step an object 100000 deep",
             ["report", run_dir("m-deep-step", ['{"kind":"val","step":{"a":' + deep + '}}'])],
             r"metrics.jsonl line 1: field 'step' must be a number, got an object$"),
        Case("report: metrics.jsonl loss a 1 MB string", ["report", run_dir("m-long", ['{"kind":"train","step":1,"loss":"' + "x" * 1000000 + '"}'])],
             r"field 'loss' must be a number \(or null\), got \"x{40}\.\.\.\" \(a string of 1000000 bytes\)$"),
        Case("report: memory.json 100000 nested arrays", ["report", run_dir("mem-deep", [good], memory=deep)],
             r"memory.json: a field is missing or has the wrong type"),
        Case("report: trace.json otherData 100000 nested arrays",
             ["report", run_dir("trace-deep", [good], trace='{"otherData":' + deep + ',"traceEvents":[]}')],
             r"trace.json: a field is missing or has the wrong type"),
        Case("report: metrics.jsonl a start record without a step", ["report", run_dir("m-start", [good, '{"kind":"start"}'])],
             r"metrics.jsonl line 2: a start record without a 'step'"),
        Case("report: metrics.jsonl a start record's step a string", ["report", run_dir("m-start-type", [good, '{"kind":"start","step":"10"}'])],
             r"metrics.jsonl line 2: field 'step' must be a number, got \"10\""),
        Case("report: report.html a directory (no reason given)", ["report", html_dir],
             r"cannot open '.*report.html': Is a directory"),
        # bench gemm: 0 is all cores (the rows say how many); a count no row could run is refused before any.
        Case("bench gemm: --threads '' (a row of 0 threads)", ["bench", "gemm", "--threads", ""],
             r"--threads: expected a number, got ''"),
        Case("bench gemm: --threads 1,-1 (after the 1-thread rows)", ["bench", "gemm", "--threads", "1,-1"],
             r"threads \(-1\) must be between 0 \(all cores\) and"),
        # bench generate: every option checked before the first measurement (which reads 512 MiB).
        *[Case(f"bench generate: {what}", ["bench", "generate", *args], expect) for what, args, expect in [
            ("--vs-uncached foo (ignored)", ["--vs-uncached", "foo"],
             r"--vs-uncached 'foo' is not one of --models"),
            ("--vs-uncached a model --models leaves out (ignored)", ["--vs-uncached", "gpt-mini", "--models", "gpt2-small"],
             r"--vs-uncached 'gpt-mini' is not one of --models"),
            ("--vs-uncached without batch 1 (ignored)", ["--vs-uncached", "gpt-mini", "--batches", "4"],
             r"--vs-uncached times the batch-1 row, but --batches does not hold 1"),
            ("--uncached-tokens 0 (0 tok/s)", ["--vs-uncached", "gpt-mini", "--uncached-tokens", "0"],
             r"--uncached-tokens must be between 1 and 100000, got 0"),
            ("--uncached-prompt-tokens past the context", ["--vs-uncached", "gpt-mini", "--models", "gpt-mini",
                                                           "--uncached-prompt-tokens", "257"],
             r"--uncached-prompt-tokens must be between 1 and gpt-mini's context of 256, got 257"),
            ("--uncached-tokens without --vs-uncached (ignored)", ["--uncached-tokens", "64"],
             r"--uncached-tokens and --uncached-prompt-tokens set up the --vs-uncached comparison"),
            ("--models foo (after the bandwidth run)", ["--models", "foo"],
             r"unknown model shape 'foo' \(expected gpt-mini, gpt2-small or gpt-mini-moe\)"),
            ("--prompt-tokens 0", ["--prompt-tokens", "0"], r"--prompt-tokens must be >= 1, got 0"),
            ("--prompt-tokens + --new-tokens past the context", ["--models", "gpt-mini", "--prompt-tokens", "200",
                                                                 "--new-tokens", "100"],
             r"--prompt-tokens \(200\) \+ --new-tokens \(100\) must be below gpt-mini's context of 256"),
            ("--new-tokens ''", ["--new-tokens", ""], r"--new-tokens: expected a number, got ''"),
            ("--batches 10^9 (a KV cache of 4 PiB)", ["--models", "gpt-mini", "--batches", "1000000000"],
             r"bench generate's gpt-mini at --batches 1000000000 needs .*, as `loom bench generate` predicts, more than "
             r"the .*generate fewer sequences together \(--batches\)$"),
            ("--threads -1", ["--threads", "-1"], r"threads \(-1\) must be between 0"),
        ]],
        # Integer fields converted unchecked: 1e300 to int is undefined, -1 indexed arrays.
        Case("report: memory.json rank 1e300", ["report", run_dir("mem-rank-huge", [good], memory=memory_rank("1e300"))],
             r"memory.json: ranks\[0\]: field 'rank' must be an integer from 0 to 2147483647, got 1e\+300$"),
        Case("report: memory.json rank -1", ["report", run_dir("mem-rank-neg", [good], memory=memory_rank("-1"))],
             r"memory.json: ranks\[0\]: field 'rank' must be an integer from 0 to 2147483647, got -1$"),
        Case("report: trace.json pid 1e300", ["report", run_dir("trace-pid", [good], trace=pipeline_trace(pid="1e300"))],
             r"trace.json: traceEvents\[1\]: field 'pid' must be an integer from 0 to 2147483646, got 1e\+300$"),
        Case("report: trace.json tid \"NaN\"", ["report", run_dir("trace-tid", [good], trace=pipeline_trace(tid='"NaN"'))],
             r"trace.json: traceEvents\[1\]: field 'tid' must be an integer from 0 to 2147483646, got \"NaN\"$"),
        Case("report: trace.json micro-batch 3.5", ["report", run_dir("trace-mb", [good], trace=pipeline_trace(mb="3.5"))],
             r"trace.json: traceEvents\[2\]: field 'args.mb' must be an integer from 0 to 2147483646, got 3.5$"),
        Case("report: trace.json chunk -1 (indexed the colours)", ["report", run_dir("trace-chunk", [good], trace=pipeline_trace(chunk="-1"))],
             r"trace.json: traceEvents\[2\]: field 'args.chunk' must be an integer from 0 to 2147483646, got -1$"),
        Case("report: trace.json pp stage -3 (crashed)", ["report", run_dir("trace-stage-neg", [good], trace=pipeline_trace(stage="-3"))],
             r"trace.json: process name 'rank 0 \(dp 0, pp -3, tp 0\)': the pp stage must be an integer below 1, the processes the trace names$"),
        Case("report: trace.json pp stage 99999999 (ran out of time)",
             ["report", run_dir("trace-stage-huge", [good], trace=pipeline_trace(stage="99999999"))],
             r"trace.json: process name 'rank 0 \(dp 0, pp 99999999, tp 0\)': the pp stage must be an integer below 1"),
    ]
