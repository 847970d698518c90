"""One measured training case (a row of the strategies and pipeline kinds' results): the strategy or
composed layout, the model, the pipeline's chunks, schedule and checkpoint mode, the batch."""

from dataclasses import dataclass

from bench.training import REGISTRY
from bench.training.dims import ParallelDims


@dataclass(frozen=True, kw_only=True)
class CaseSpec:
    """One measured case: a row of the results table."""

    strategy: str
    model: str  # preset name
    world: int  # processes of the launch (1 for single-process strategies)
    chunks: int = 1  # micro-batches per mini-batch (pipeline)
    schedule: str = ""  # pipeline schedule, "" elsewhere
    checkpoint: str = "never"
    batch: int  # global mini-batch, samples
    micro_batch: int = 0  # samples per micro-batch in fixed-micro-batch mode; 0: fixed mini-batch
    balance: tuple[int, ...] = ()
    bucket_cap_mb: float = 25.0
    # composed layouts (bench.training.layout): degrees inside the world; pp = world / (tp x dp x fsdp)
    tp: int = 1  # tensor-parallel degree
    dp: int = 1  # DDP replicas (mesh dimension dp_replicate)
    fsdp: int = 1  # FSDP2 shards (mesh dimension dp_shard)

    @property
    def composed(self) -> bool:
        return self.tp * self.dp * self.fsdp > 1

    @property
    def dims(self) -> ParallelDims:
        """The case's degrees: a composed case's own; otherwise its strategy's at its world."""
        if not self.composed:
            return REGISTRY.get(self.strategy).dims(self.world)
        inner = self.tp * self.dp * self.fsdp
        return ParallelDims(world=self.world, pp=max(self.world // inner, 1), dp_replicate=self.dp,
                            dp_shard=self.fsdp, tp=self.tp)

    @property
    def layout(self) -> str:
        """'pp2.dp2.tp2' for a composed case, '' otherwise (one parallelism: the strategy says it)."""
        return self.dims.layout if self.composed else ""

    @property
    def samples_per_micro_batch(self) -> int:
        """What one micro-batch of one data-parallel pipeline holds (the results' micro_batch): the
        fixed micro-batch, else the pipeline's share of the mini-batch (batch / (dp x fsdp) for a
        composed case; a plain strategy's own batch) over the chunks."""
        if self.micro_batch:
            return self.micro_batch
        return (self.dims.local_batch(self.batch) if self.composed else self.batch) // self.chunks

    @property
    def sweep_mode(self) -> str:
        return "micro-batch" if self.micro_batch else "mini-batch"

    @property
    def key(self) -> str:  # the harness's unit key
        return self.case_id

    @property
    def case_id(self) -> str:
        bal = "-".join(map(str, self.balance)) or "even"
        return (f"{self.strategy}.{self.model}.w{self.world}.m{self.chunks}.{self.schedule or 'none'}."
                f"{self.checkpoint}.b{self.batch}.mb{self.micro_batch}.bal{bal}"
                + (f".{self.layout}" if self.composed else ""))
