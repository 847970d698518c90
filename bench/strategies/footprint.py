"""A training case's memory in closed form, from the model preset: what each strategy's own
`memory` answer is built from (bench.strategies.base.Strategy.memory), and preflight sums.

    states(P) = P x (4 B params + 4 B grads + optimizer state: 0 B SGD, 8 B Adam)
    A(b)      = activation_bytes(spec, b): saved activations of a forward at b samples
"""

import math
from dataclasses import dataclass

PARAM_BYTES = 4  # every reference model is float32
# Optimizer state per parameter, bytes: bench/strategies/base.py and pp.py use torch.optim.SGD
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


def sharded(f: Footprint) -> float:
    """tp, pp: states(P) / world + A(batch) / world (tp: sharded layers dominate the activations;
    pp: GPipe keeps every micro-batch of its stage, 1F1B fewer: an upper bound)."""
    w = max(f.world, 1)
    return f.states / w + f.acts(f.batch) / w


def layout_memory(f: Footprint, dims) -> float:
    """A composed layout (bench.strategies.dims.ParallelDims): parameters, gradients and optimizer
    state split over pp x tp x dp_shard, a DDP replica's gradient buckets (4 B x its parameters),
    and A(batch / dp) split over pp x tp (the pipeline and tp bound as in `sharded`)."""
    split = dims.pp * dims.tp
    states = f.states / (split * dims.dp_shard)
    buckets = PARAM_BYTES * f.params / split if dims.dp_replicate > 1 and dims.dp_shard == 1 else 0
    return states + buckets + f.acts(f.batch / dims.dp) / split
