"""Layouts that do not fit the model or the processes (single process, and under mpirun)."""
from run import Case

CLASS = "layout"


def cases(fx):
    def train(what, args, expect, ranks=0, slow=False):
        return Case(what, ["train", *fx.tiny, "--steps", "1", *args, *fx.out()], expect, ranks=ranks, slow=slow)

    sched = fx.file("bad.schedule", "F0 F1 B0\nF0 B1 B0\n")
    return [
        train("dp 2 without mpirun", ["--dp", "2"], r"needs 2 processes: start it with mpirun -np 2"),
        train("dp 0", ["--dp", "0"], r"parallel degrees must be >= 1"),
        train("pp 2 x 3 chunks over 4 layers (refused by the configuration, was one rank's error)",
              ["--n-layer", "4", "--pp", "2", "--chunks", "3", "--schedule", "interleaved", "--micro-batches", "4"],
              r"pipeline: 2 stages x 3 chunks = 6 virtual stages need at least as many transformer blocks, the model has 4"),
        train("tp -1", ["--tp", "-1"], r"parallel degrees must be >= 1"),
        train("sequence_parallel without tp", ["--sequence-parallel"], r"sequence_parallel needs tensor parallelism"),
        # ep on a 3D grid splits each plane rank's block of the experts: 6 experts over row x col x ep = 2 x 1 x 2.
        train("ep 2 on a 2,1,1 grid with 6 experts", ["--dp", "2", "--ep", "2", "--tp-3d", "2,1,1", "--moe-experts", "6"],
              r"moe_experts \(6\) must be divisible by row x col x ep \(2 x 1 x 2\) of tp_3d \(2,1,1\)"),
        train("sequence_parallel, block_size not divisible by tp", ["--tp", "3", "--sequence-parallel", "--n-head", "3",
              "--n-embd", "18", "--block-size", "16"], r"block_size \(16\) must be divisible by tp \(3\)"),
        train("hsdp_shard without zero", ["--hsdp-shard", "2"], r"hsdp_shard needs a sharded mode"),
        train("zero3_reshard step under ZeRO-2", ["--zero", "2", "--zero3-reshard", "step"],
              r"zero3_reshard = 'step' frees ZeRO-3's gathered parameters: set zero = 3"),
        train("zero3_reshard never", ["--zero", "3", "--zero3-reshard", "never"],
              r"zero3_reshard must be 'micro-batch' or 'step', got 'never'"),
        train("hsdp_shard not dividing dp", ["--dp", "4", "--zero", "1", "--hsdp-shard", "3"], r"hsdp_shard \(3\) must divide dp \(4\)"),
        train("zero with allreduce tree", ["--zero", "1", "--allreduce", "tree"], r"ZeRO reduce-scatters"),
        train("interleaved with chunks 1", ["--schedule", "interleaved"], r"interleaved schedule needs chunks >= 2"),
        train("chunks 2 with 1f1b", ["--chunks", "2"], r"chunks > 1 .* needs schedule"),
        train("pp_layers malformed", ["--pp-layers", "2,x"], r"pp_layers must list blocks per stage"),
        train("pp_layers with a zero", ["--pp-layers", "0,1"], r"gives stage 0 0 blocks: every pipeline stage holds at least one"),
        train("schedule_file without pp", ["--schedule-file", sched], r"schedule_file .* is a pipeline schedule: set pp > 1"),
        train("graph_aggregation_chunks on a GPT", ["--graph-aggregation-chunks", "4"],
              r"graph_aggregation_chunks \(4\) splits the aggregation of a GCN on a 3D grid"),
        train("graph_aggregation_chunks 0", ["--graph-aggregation-chunks", "0"], r"graph_aggregation_chunks must be >= 1"),
        train("dp 3 under mpirun -np 2", ["--dp", "3"], r"dp|3", ranks=2, slow=True),
        # A first multi-rank run forgets the degrees: the message says what to give.
        train("no degrees under mpirun -np 2", [], r"= 1 != world size 2 \(the job has 2 processes: give degrees whose "
              r"product is 2, e\.g\. --dp 2, or run it without mpirun\)", ranks=2, slow=True),
        train("dp 2 under mpirun -np 3", ["--dp", "2"], r"= 2 != world size 3 \(the job has 3 processes: give degrees whose "
              r"product is 3, or start 2 with mpirun -np 2\)", ranks=3, slow=True),
        train("tp 2 not dividing 3 heads (np 2)", ["--tp", "2", "--n-head", "3", "--n-embd", "18"], r"n_head|tp", ranks=2, slow=True),
        # bf16's memory check divided the heads among tp ranks first: 1 / 2 = 0 heads, a division by zero.
        train("tp 2 not dividing 1 head in bf16 (np 2)", ["--tp", "2", "--n-head", "1", "--n-embd", "8", "--precision", "bf16"],
              r"n_head \(1\) must be divisible by the tensor-parallel degree tp \(2\)", ranks=2, slow=True),
        # Refused by the configuration on every rank alike (was one rank's error from the model builder).
        train("padded_vocab_size 65 not split by tp 3 (np 3)", ["--tp", "3", "--n-head", "3", "--n-embd", "18",
              "--padded-vocab-size", "65"], r"(?m)^loom: error: padded_vocab_size \(65\) must be divisible by the "
              r"tensor-parallel degree tp \(3\): give a multiple of 64 x tp, or 0", ranks=3, slow=True),
        train("pp 2 with 1 layer (np 2)", ["--pp", "2"], r"n_layer|block|stage", ranks=2, slow=True),
        train("pp_layers not summing to n_layer (np 2)", ["--pp", "2", "--n-layer", "2", "--pp-layers", "1,3"], r"pp_layers", ranks=2, slow=True),
        train("pp_layers with 3 stages for pp 2 (np 2)", ["--pp", "2", "--n-layer", "3", "--pp-layers", "1,1,1"], r"pp_layers", ranks=2, slow=True),
        train("interleaved, micro_batches not divisible by pp (np 2)", ["--pp", "2", "--n-layer", "4", "--schedule", "interleaved",
              "--chunks", "2", "--micro-batches", "3"], r"micro-batches \(3\) to be a multiple of pp \(2\)", ranks=2, slow=True),
        train("a malformed schedule file (np 2)", ["--pp", "2", "--n-layer", "2", "--micro-batches", "2", "--schedule-file", sched],
              r"bad.schedule", ranks=2, slow=True),
        train("a missing schedule file (np 2)", ["--pp", "2", "--n-layer", "2", "--schedule-file", "/nonexistent/s.txt"],
              r"/nonexistent/s.txt", ranks=2, slow=True),
    ]
