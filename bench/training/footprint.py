"""A training case's memory in closed form, from the model preset: what each strategy's own
`memory` answer is built from (bench.training.base.Strategy.memory), and preflight sums.

    states(P) = P x (4 B params + 4 B grads + optimizer state: 0 B SGD, 8 B Adam)
    A(b)      = activation_bytes(spec, b): saved activations of a forward at b samples
"""

import math
from dataclasses import dataclass

from bench.training.dims import ParallelDims
from bench.workloads.specs import even_balance, split_pieces

PARAM_BYTES = 4  # every reference model is float32
# Optimizer state per parameter, bytes: bench/training/base.py and pp.py use torch.optim.SGD
# without momentum (no state); momentum would keep one buffer, Adam two (exp_avg, exp_avg_sq).
OPTIMIZER = "sgd"
OPTIMIZER_STATE_BYTES = {"sgd": 0, "sgd-momentum": 4, "adam": 8}
# Saved activations per token and block, in units of width (GPT): ln1 in/out, q, k, v, attention
# out and its reshape, out-proj, residual, ln2 out, up (4), gelu (4), down, residual ~ 20.
GPT_ACTS_PER_BLOCK = 20
GPT_ACTS_PER_VOCAB = 3  # logits, log-softmax, their gradient
MLP_ACTS_PER_BLOCK = 2  # Linear out, GELU out


def model_params(spec) -> int:
    """Parameter count of a preset (bench.workloads.models.build_model), in closed form."""
    w, d = spec.width, spec.depth
    if spec.family == "timed":
        return d * w
    if spec.family == "mlp":
        return d * (w * w + w)
    block = 4 * (w * w + w) + 2 * 2 * w + (w * 4 * w + 4 * w) + (4 * w * w + w)  # attn, 2 LN, up, down
    return spec.vocab * w + spec.seq * w + d * block + 2 * w + w * spec.vocab


def activation_bytes(spec, batch: float) -> int:
    """Saved activations of one forward at `batch` samples (float32):
    MLP: batch x width x depth x MLP_ACTS_PER_BLOCK x 4 B;
    GPT: batch x seq x (width x depth x GPT_ACTS_PER_BLOCK + vocab x GPT_ACTS_PER_VOCAB) x 4 B.
    Attention scores (heads x seq^2) are not counted: SDPA's fused kernels do not keep them."""
    if spec.family != "gpt":  # mlp, timed (its blocks keep input and output: the MLP's count)
        per_sample = spec.width * (spec.depth * MLP_ACTS_PER_BLOCK + 1)
    else:
        per_sample = spec.seq * (spec.width * spec.depth * GPT_ACTS_PER_BLOCK + spec.vocab * GPT_ACTS_PER_VOCAB)
    return int(math.ceil(batch * per_sample * PARAM_BYTES))


@dataclass(frozen=True)
class Footprint:
    """One case's pieces: a strategy's `memory(f)` combines them into its per-rank peak bytes."""

    spec: object  # bench.workloads.models.ModelSpec
    batch: int  # global batch
    world: int
    optimizer: str = OPTIMIZER
    stage_ids: tuple = ()  # per pipeline rank, the stages it holds (the schedule's placement); (): one each
    balance: tuple = ()  # blocks per stage; (): as even as possible (bench.training.pp.validate)

    @property
    def params(self) -> int:
        return model_params(self.spec)

    @property
    def states(self) -> int:
        return self.params * (2 * PARAM_BYTES + OPTIMIZER_STATE_BYTES[self.optimizer])

    def acts(self, batch: float) -> int:
        return activation_bytes(self.spec, batch)

    def check_bytes(self) -> int:
        """The single-process reference on rank 0 (base.reference_check): a full model and its
        gradients on the global batch, and the gathered gradients: 12 B x P + A(batch)."""
        return 3 * PARAM_BYTES * self.params + self.acts(self.batch)


# ---- per piece and per stage (a pipeline stage holds pieces [lo, hi) of build_model's Sequential) ----

def piece_params(spec, i: int, tp: int = 1, role: str = "") -> float:
    """Parameters of piece `i` held by one TP rank (bench.training.tp.plan): a GPT block's q, k,
    v, out, up, down are split (12 w^2 + 7 w of its 12 w^2 + 13 w; the out and down biases and the
    norms, 6 w, replicated), the embedding and the head replicated; an MLP block (w^2 + w) split
    when it is the Colwise (weight and bias) or Rowwise (weight) half of a pair (`role`: col, row)."""
    w = spec.width
    if spec.family == "timed":
        return w
    if spec.family == "mlp":
        return {"col": (w * w + w) / tp, "row": w * w / tp + w}.get(role, w * w + w)
    if i == 0:
        return (spec.vocab + spec.seq) * w
    if i == spec.depth + 1:
        return 2 * w + w * spec.vocab
    return (12 * w * w + 7 * w) / tp + 6 * w


def stage_pieces(spec, lo: int, hi: int, tp: int = 1) -> list[float]:
    """Parameters of each piece of a stage held by one TP rank; MLP blocks pair up inside the stage
    (Colwise, Rowwise; an odd last one replicated), as the TP plan of a stage does."""
    if spec.family != "mlp" or tp == 1:
        return [piece_params(spec, i, tp) for i in range(lo, hi)]
    n = hi - lo
    roles = ["col" if k % 2 == 0 else "row" for k in range(n - n % 2)] + [""] * (n % 2)
    return [piece_params(spec, lo + k, tp, r) for k, r in enumerate(roles)]


def stage_acts_per_sample(spec, lo: int, hi: int, tp: int = 1) -> float:
    """Saved activations of a stage per sample, in floats (the terms of activation_bytes, each on
    the stage that holds it): blocks split over TP (as `sharded` assumes: the sharded layers
    dominate); the MLP's input on the first stage; a GPT head's logits (vocab x seq x
    GPT_ACTS_PER_VOCAB) whole on the last stage, on every TP rank (the head is replicated)."""
    if spec.family != "gpt":
        return (hi - lo) * spec.width * MLP_ACTS_PER_BLOCK / tp + (spec.width if lo == 0 else 0)
    blocks = len([i for i in range(lo, hi) if 1 <= i <= spec.depth])
    head = spec.seq * spec.vocab * GPT_ACTS_PER_VOCAB if hi == spec.depth + 2 else 0
    return blocks * spec.seq * spec.width * GPT_ACTS_PER_BLOCK / tp + head


def layout_ranks(f: Footprint, dims, check: bool = False) -> list[int]:
    """Peak bytes of every rank of a mesh layout (bench.training.dims.ParallelDims), rank order:
    its stages' parameters as one TP rank holds them (P_r), then
        states(P_r) / dp_shard                  parameters, gradients, optimizer state (FSDP shards them)
      + 4 B x P_r                               a DDP replica's gradient buckets (dp_replicate > 1 alone)
      + 8 B x the largest piece of P_r          FSDP (dp_shard > 1): one piece gathered with its gradient
      + A_r(batch / dp)                         its stages' activations (stage_acts_per_sample)
      + check_bytes() on rank 0 when `check`    the single-process reference runs there.
    Activations are of the pipeline's whole mini-batch (GPipe keeps every micro-batch of its stage;
    1F1B fewer: an upper bound)."""
    p = dims.pp
    ids = f.stage_ids or tuple((q,) for q in range(p))
    n = sum(len(s) for s in ids)
    bounds = split_pieces(f.spec, f.balance or even_balance(f.spec.depth, n))
    per_param = 2 * PARAM_BYTES + OPTIMIZER_STATE_BYTES[f.optimizer]
    out = []
    for r in range(dims.world):
        stages = [bounds[s] for s in ids[dims.coords(r)["pp"]]]
        pieces = [x for lo, hi in stages for x in stage_pieces(f.spec, lo, hi, dims.tp)]
        params = sum(pieces)
        need = params * per_param / dims.dp_shard
        if dims.dp_replicate > 1 and dims.dp_shard == 1:
            need += PARAM_BYTES * params
        if dims.dp_shard > 1:
            need += 2 * PARAM_BYTES * max(pieces)
        need += f.batch / dims.dp * sum(stage_acts_per_sample(f.spec, lo, hi, dims.tp) for lo, hi in stages) * PARAM_BYTES
        if check and r == 0:
            need += f.check_bytes()
        out.append(int(math.ceil(need)))
    return out


# The strategies' own answers (rank 0, the most loaded), one per kind of layout:
def replicated(f: Footprint) -> float:
    """dp, layer (one process holds the model): states(P) + A(batch)."""
    return f.states + f.acts(f.batch)


def ddp_memory(f: Footprint) -> float:
    """states(P) + 4 B x P (gradient buckets) + A(batch / world)."""
    return f.states + PARAM_BYTES * f.params + f.acts(f.batch / max(f.world, 1))


def fsdp_memory(f: Footprint) -> float:
    """states(P) / world + 8 B x P / depth (one block gathered) + A(batch / world)."""
    w = max(f.world, 1)
    return f.states / w + 2 * PARAM_BYTES * f.params / max(f.spec.depth, 1) + f.acts(f.batch / w)


def layout_memory(f: Footprint, dims) -> float:
    """A mesh layout (bench.training.dims.ParallelDims: pp, tp and the composed layouts): the
    most loaded rank of layout_ranks (without the check)."""
    return max(layout_ranks(f, dims))


def pipeline_memory(f: Footprint) -> float:
    """pp alone: one stage per rank unless f.stage_ids says otherwise (layout_ranks)."""
    return layout_memory(f, ParallelDims(world=f.world, pp=f.world))


def tp_memory(f: Footprint) -> float:
    """tp alone: every rank the whole model's TP shard (layout_ranks)."""
    return layout_memory(f, ParallelDims(world=f.world, tp=f.world))
