"""The other commands' inputs: plan, schedule, report, verify, bench, convert."""
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
    return [
        Case("unknown command (typo)", ["trian"], r"unknown command 'loom trian' \(did you mean 'train'\?\)"),
        Case("bench: unknown benchmark", ["bench", "gem"], r"unknown command 'loom bench gem'"),
        Case("plan: unknown model preset", [*plan, "--model", "gpt5"], r"unknown model 'gpt5'"),
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
        Case("schedule: pp 0", ["schedule", "--pp", "0", "--micro-batches", "2"], r"pp\(0\)"),
        Case("schedule: unknown schedule", ["schedule", "--pp", "2", "--micro-batches", "2", "--schedule", "zigzag"], r"zigzag"),
        Case("schedule: file missing", ["schedule", "--file", "/nonexistent/s.txt"], r"/nonexistent/s.txt"),
        Case("schedule: file garbage", ["schedule", "--file", fx.file("garbage.sched", "X9 Q1\n\x00\xff")], r"garbage.sched|X9"),
        Case("schedule: file a FIFO", ["schedule", "--file", fx.fifo("sched.fifo")], r"schedule file '.*sched.fifo' is a FIFO"),
        Case("schedule: file with a deadlock", ["schedule", "--file", fx.file("deadlock.sched", "B0 F0\nF0 B0\n")], r"deadlock|B0|order|before"),
        Case("schedule: svg into a missing directory", ["schedule", "--pp", "2", "--micro-batches", "2", "--svg",
                                                        "/nonexistent/dir/s.svg"], r"/nonexistent/dir/s.svg"),
        Case("report: missing directory", ["report", "/nonexistent/run"], r"no metrics.jsonl in '/nonexistent/run'"),
        Case("report: metrics.jsonl not JSON", ["report", metrics], r"metrics.jsonl line 1 is not JSON"),
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
             ["report", run_dir("mem-type", [good], memory='{"ranks": [{"rank": "zero", "current": {}, "peak": {}, "formula": {}}]}')],
             r"memory.json: a field is missing or has the wrong type"),
        Case("report: memory.json an array", ["report", run_dir("mem-array", [good], memory="[]")],
             r"memory.json: a field is missing or has the wrong type"),
        Case("report: trace.json an event's ts a string",
             ["report", run_dir("trace-type", [good], trace='{"traceEvents": [{"ph": "X", "pid": 0, "tid": 0, "ts": "soon", "dur": 1}]}')],
             r"trace.json: a field is missing or has the wrong type"),
        Case("report: trace.json otherData a number", ["report", run_dir("trace-other", [good], trace='{"otherData": 5, "traceEvents": []}')],
             r"trace.json: a field is missing or has the wrong type"),
        Case("verify: dp 2 without mpirun", ["verify", "--dp", "2"], r"needs 2 processes"),
        Case("verify: missing data", ["verify", "--data", "/nonexistent/d.txt"], r"/nonexistent/d.txt"),
        Case("convert: no --from", ["convert", "--to", fx.path("c")], r"--from"),
        Case("convert: --tp 0", ["convert", "--from", fx.trained("sharded"), "--to", fx.path("conv"), "--tp", "0"], r"tp"),
    ]
