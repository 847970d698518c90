"""Reference models, seeded: an MLP (nn.Sequential of Linear + activation blocks) and a small
GPT-style decoder (token embedding, N blocks of attention + MLP, head).

Both are an `nn.Sequential` of *pieces* so every strategy can take them apart the same way:
MLP pieces are its blocks; GPT pieces are [Embed, Block x n_layer, Head]. The timed family
(TimedBlock) is the pipeline bubble's yardstick: each block's forward, input-gradient and
weight-gradient backward take known times, so every schedule's bubble is known exactly from its
action order (bench.training.replay.exact_durations). On CPU an action sleeps on the host
(sleeping ranks do not compete for cores); on CUDA it occupies the device (`occupy`: a spin
kernel of the cycles that many seconds take, bench.workloads.spin), so the CUDA-event
spans and waits measure the known times too. A pipeline stage is a
contiguous slice; `balance` counts blocks ("layers"), the GPT embedding rides with the first
stage and the head with the last. Attention uses separate q/k/v Linears so Megatron-style
column sharding splits whole heads (a fused qkv weight would be cut across q and k).
"""

import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from bench.workloads import spin

# the presets and the stage arithmetic live in specs.py (no torch); importers of models find them here too
from bench.workloads.specs import PRESETS, ModelSpec, even_balance, get_spec, split_pieces  # noqa: F401


class MLPBlock(nn.Sequential):
    """Linear(width, width) + GELU; index 0 is the Linear (the TP plan names it '<i>.0')."""

    def __init__(self, width: int):
        super().__init__(nn.Linear(width, width), nn.GELU())


# The timed workload on CUDA spins (bench.workloads.spin: calibrated per device, re-checked per
# case, each spin bracketed by events while a case's ledger is open). A host sleep on CUDA would
# leave the device idle: the CUDA-event span of a forward would start when its receive lands and
# end when the host wakes, and the measured bubble would mean nothing.


def _device_of(t: torch.Tensor) -> torch.device:
    return t.device


def occupy(seconds: float, t: torch.Tensor):
    """One timed action of `seconds` where `t` lives: on CUDA a spin kernel on the current stream
    (the host returns at once, the device is busy `seconds`); elsewhere a host sleep."""
    dev = _device_of(t)
    if dev.type != "cuda":
        time.sleep(seconds)
        return
    current = torch.cuda.current_device()
    index = dev.index if dev.index is not None else current
    if index == current:  # a pipeline rank's one device
        spin.spin(seconds, index)
        return
    with torch.cuda.device(index):  # a rank driving several devices (layer): the stream of t's
        spin.spin(seconds, index)


class _SleepInput(torch.autograd.Function):
    """Identity on the activation: forward takes F, backward (the input gradient) takes I (occupy)."""

    @staticmethod
    def forward(ctx, x, fwd_s: float, bwd_s: float):
        ctx.bwd_s = bwd_s
        occupy(fwd_s, x)
        return x.clone()  # a new tensor, not a view: torch's last stage detaches its output in place

    @staticmethod
    def backward(ctx, g):
        occupy(ctx.bwd_s, g)
        return g, None, None


class _SleepWeight(torch.autograd.Function):
    """Identity on the weight: its backward (the weight gradient) takes W (occupy)."""

    @staticmethod
    def forward(ctx, w, bwd_s: float):
        ctx.bwd_s = bwd_s
        return w.clone()

    @staticmethod
    def backward(ctx, g):
        occupy(ctx.bwd_s, g)
        return g, None


class _TPSleepInput(torch.autograd.Function):
    """The timed tp plan's input path: forward takes F / tp then all-reduces the activation across
    the tp group (Megatron's g after a Rowwise layer), backward takes I / tp then all-reduces the
    input gradient (f before a Colwise one). Every tp rank holds the same values, so the all-reduced
    copy is dropped: the block's numbers are the single-process ones, its cost is a known time plus
    one all-reduce of b x width x 4 bytes each way."""

    @staticmethod
    def forward(ctx, x, fwd_s: float, bwd_s: float, block):
        ctx.bwd_s, ctx.block = bwd_s, block
        occupy(fwd_s, x)
        block.all_reduce(x)
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        occupy(ctx.bwd_s, g)
        ctx.block.all_reduce(g)
        return g, None, None, None


class TimedBlock(nn.Module):
    """y = x * w (w: one weight per feature), with the forward, the input-gradient path and the
    weight-gradient path each taking a known time (occupy). torch's split backward (stage_backward_input,
    then stage_backward_weight) runs the two paths as separate actions. Under the timed tp plan
    (`tp_shard`) each path takes its time / tp, and the forward and the input-gradient each add one
    all-reduce of the activation across the tp group (the weight gradient none)."""

    def __init__(self, width: int, times: tuple[float, float, float]):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(width))
        self.times = times
        self.tp, self.tp_group = 1, None
        self.sent_bytes: list[int] = []  # the bytes of every tp all-reduce this block issued (tests read it)

    def tp_shard(self, group, degree: int):
        """The timed tp plan: this block's work split over `degree` ranks of `group`."""
        self.tp, self.tp_group = degree, group

    def all_reduce(self, t: torch.Tensor):
        import torch.distributed as dist  # lazy: only the timed tp plan communicates

        buf = t.detach().clone()
        dist.all_reduce(buf, group=self.tp_group)
        self.sent_bytes.append(buf.numel() * buf.element_size())

    def forward(self, x):
        f, i, w = (t / self.tp for t in self.times)
        if self.tp > 1:
            return _TPSleepInput.apply(x, f, i, self) * _SleepWeight.apply(self.weight, w)
        return _SleepInput.apply(x, f, i) * _SleepWeight.apply(self.weight, w)


class Embed(nn.Module):
    def __init__(self, vocab: int, width: int, seq: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)

    def forward(self, idx):  # [B, T] int64 -> [B, T, width]
        t = torch.arange(idx.shape[1], device=idx.device)
        return self.tok(idx) + self.pos(t)


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.head_dim = width // heads
        self.q, self.k, self.v = (nn.Linear(width, width) for _ in range(3))
        self.out = nn.Linear(width, width)

    def forward(self, x):  # heads inferred from the (possibly column-sharded) projection width
        b, t, _ = x.shape
        q, k, v = (m(x).view(b, t, -1, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(width), Attention(width, heads)
        self.ln2, self.mlp = nn.LayerNorm(width), FeedForward(width)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, width: int, vocab: int):
        super().__init__()
        self.ln = nn.LayerNorm(width)
        self.proj = nn.Linear(width, vocab, bias=False)

    def forward(self, x):  # -> logits [B, T, vocab]
        return self.proj(self.ln(x))


def build_model(spec: ModelSpec, seed: int) -> nn.Sequential:
    """The full model, initialised from `seed` (identical on every rank that calls this)."""
    torch.manual_seed(seed)
    if spec.family == "timed":
        return nn.Sequential(*[TimedBlock(spec.width, spec.block_times(b)) for b in range(spec.depth)])
    if spec.family == "mlp":
        return nn.Sequential(*[MLPBlock(spec.width) for _ in range(spec.depth)])
    pieces = [Embed(spec.vocab, spec.width, spec.seq)]
    pieces += [Block(spec.width, spec.heads) for _ in range(spec.depth)]
    pieces.append(Head(spec.width, spec.vocab))
    model = nn.Sequential(*pieces)
    for name, p in model.named_parameters():  # GPT-2 init: N(0, 0.02), zero biases
        if p.dim() >= 2:
            nn.init.normal_(p, std=0.02 / (math.sqrt(2 * spec.depth) if name.endswith(("out.weight", "down.weight")) else 1))
        elif name.endswith("bias"):
            nn.init.zeros_(p)
    return model


def blocks(model: nn.Sequential, spec: ModelSpec) -> list[nn.Module]:
    """The repeated blocks (what balance counts and FSDP shards one by one)."""
    pieces = list(model)
    return pieces if spec.family != "gpt" else pieces[1:-1]


def loss_fn(spec: ModelSpec):
    """Mean loss over the samples given: MSE for the MLP, token cross-entropy for GPT."""
    if spec.family != "gpt":  # mlp, timed
        return lambda out, target: F.mse_loss(out, target)
    return lambda logits, target: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


