"""The reference models' presets (ModelSpec: family, width, depth, ...) and the arithmetic of
splitting one into pipeline stages: what configs, the memory preflight and the planner read without
building a model, so without importing torch (bench.workloads.models builds the models)."""

from dataclasses import dataclass

from bench.errors import unknown


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    preset: str
    family: str  # mlp | gpt | timed (an MLP-shaped yardstick whose blocks take known times: occupy)
    width: int  # MLP hidden = in = out; GPT d_model
    depth: int  # MLP blocks; GPT n_layer (the "layers" that balance counts)
    heads: int = 0  # GPT only
    vocab: int = 0  # GPT only
    seq: int = 0  # GPT only: tokens per sample
    fwd_s: float = 0.0  # timed only: seconds each block's forward takes (F; a host sleep on CPU, a spin on CUDA)
    bwd_input_s: float = 0.0  # timed only: its input-gradient backward (I)
    bwd_weight_s: float = 0.0  # timed only: its weight-gradient backward (W)
    slow_block: int = -1  # timed only: this block (0-based) takes slow_factor x the times (delay injection)
    slow_factor: float = 1.0

    def block_times(self, block: int) -> tuple[float, float, float]:
        """Timed family: (F, I, W) seconds of one block's forward, input- and weight-gradient."""
        k = self.slow_factor if block == self.slow_block else 1.0
        return self.fwd_s * k, self.bwd_input_s * k, self.bwd_weight_s * k

    @property
    def times_known(self) -> bool:
        """Every action's time is known (the timed family: block_times), so a schedule's exact
        bubble is too (bench.training.replay)."""
        return self.family == "timed"

    @property
    def tokens_per_sample(self) -> int:
        return self.seq if self.family == "gpt" else 1

    @property
    def boundary_bytes_per_sample(self) -> int:
        """Bytes of the float32 activation between two pieces (what a pipeline stage sends on), per sample."""
        return self.width * self.tokens_per_sample * 4


# MLP presets: width x depth. mlp-pipe is sized for the 2-core CPU default of bench-pipeline
# (batch 1024): a stage's weights (4 x 1 MiB) stay in cache, so the two ranks computing at once
# do not fight over memory bandwidth, and a 256-row micro-batch keeps ~94% of the GEMM speed of
# the full batch. Measured: chunks=4 beats chunks=1 by ~1.4x there (docs/strategies.md); with
# width 1024 the ranks slowed each other down ~1.5x and chunks=4 lost.
PRESETS = {
    "mlp-tiny": ModelSpec(preset="mlp-tiny", family="mlp", width=32, depth=4),
    "mlp-small": ModelSpec(preset="mlp-small", family="mlp", width=256, depth=8),
    "mlp-pipe": ModelSpec(preset="mlp-pipe", family="mlp", width=512, depth=8),
    "mlp-large": ModelSpec(preset="mlp-large", family="mlp", width=4096, depth=16),
    # the yardstick: 8 blocks of 20 ms forward, 20 ms input gradient, 20 ms weight gradient
    # (F = I = W: ZB-V's zero-bubble case); 20 ms keeps a rank's per-action host work (~0.2-1 ms
    # on a loaded 2-core host) small beside the action. timed-slow: block 2 is 2x slower (delay injection)
    "timed": ModelSpec(preset="timed", family="timed", width=16, depth=8, fwd_s=0.02, bwd_input_s=0.02,
                       bwd_weight_s=0.02),
    "timed-slow": ModelSpec(preset="timed-slow", family="timed", width=16, depth=8, fwd_s=0.02, bwd_input_s=0.02,
                            bwd_weight_s=0.02, slow_block=2, slow_factor=2.0),
    "gpt-tiny": ModelSpec(preset="gpt-tiny", family="gpt", width=32, depth=4, heads=4, vocab=128, seq=16),
    "gpt-small": ModelSpec(preset="gpt-small", family="gpt", width=128, depth=4, heads=4, vocab=512, seq=64),
    "gpt-124m": ModelSpec(preset="gpt-124m", family="gpt", width=768, depth=12, heads=12, vocab=50304, seq=1024),
    "gpt-350m": ModelSpec(preset="gpt-350m", family="gpt", width=1024, depth=24, heads=16, vocab=50304, seq=1024),
    "gpt-1b": ModelSpec(preset="gpt-1b", family="gpt", width=2048, depth=18, heads=16, vocab=50304, seq=1024),
}


def get_spec(preset: str) -> ModelSpec:
    if preset not in PRESETS:
        raise unknown("model preset", preset, PRESETS)
    return PRESETS[preset]


def split_pieces(spec: ModelSpec, balance: tuple[int, ...]) -> list[tuple[int, int]]:
    """[start, end) piece indices of each stage for `balance` blocks per stage."""
    off = 0 if spec.family != "gpt" else 1
    bounds, start = [], 0
    for i, n in enumerate(balance):
        lo, hi = start + off, start + off + n
        if spec.family == "gpt":
            lo = 0 if i == 0 else lo
            hi = hi + 1 if i == len(balance) - 1 else hi
        bounds.append((lo, hi))
        start += n
    return bounds


def even_balance(layers: int, stages: int) -> tuple[int, ...]:
    base, extra = divmod(layers, stages)
    return tuple(base + (1 if i < extra else 0) for i in range(stages))
