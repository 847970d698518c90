"""Degree arithmetic in one place (torchtitan's ParallelDims is the model): world = pp x
dp_replicate x dp_shard x tp, checked, with errors that show the arithmetic, and the one
DeviceMesh a composed layout runs on.

Mesh dimensions, outermost first (torchtitan's order): pp, dp_replicate (DDP replicas),
dp_shard (FSDP2 shards), tp. Ranks of one tp group are adjacent (tp innermost: on a GPU node
they share NVLink); a pipeline stage's ranks are the dp x tp block of one pp index.
"""

from dataclasses import dataclass

from bench.errors import BenchError

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")
# how a degree reads in a layout name and in errors
SHORT = {"pp": "pp", "dp_replicate": "dp", "dp_shard": "fsdp", "tp": "tp"}


def arithmetic(world: int, degrees: dict) -> str:
    """'pp(2) * tp(3) = 6 != world(4)': the degrees > 1 (pp when none), their product, the world."""
    used = [n for n in MESH_DIMS if degrees.get(n, 1) > 1] or ["pp"]
    prod = 1
    for n in MESH_DIMS:
        prod *= degrees.get(n, 1)
    return f"{' * '.join(f'{SHORT[n]}({degrees.get(n, 1)})' for n in used)} = {prod} {'==' if prod == world else '!='} world({world})"


@dataclass(frozen=True, kw_only=True)
class ParallelDims:
    world: int  # processes
    pp: int = 1  # pipeline ranks (stages per rank are the schedule's business)
    dp_replicate: int = 1  # data-parallel replicas (DDP): each gets batch / dp samples
    dp_shard: int = 1  # data-parallel shards (FSDP2): parameters sharded, batch split as under DDP
    tp: int = 1  # tensor-parallel degree

    def __post_init__(self):
        for name in ("world", *MESH_DIMS):
            if getattr(self, name) < 1:
                raise BenchError(f"{name} {getattr(self, name)} must be >= 1")
        if self.product != self.world:
            raise BenchError(f"{arithmetic(self.world, {n: getattr(self, n) for n in MESH_DIMS})}; choose degrees "
                             f"whose product is the world size")

    @property
    def product(self) -> int:
        return self.pp * self.dp_replicate * self.dp_shard * self.tp

    @property
    def dp(self) -> int:
        """Data-parallel degree: how many ways the mini-batch is split."""
        return self.dp_replicate * self.dp_shard

    @property
    def composed(self) -> bool:
        """More than one parallelism at once."""
        return sum(getattr(self, n) > 1 for n in MESH_DIMS) > 1

    @property
    def enabled(self) -> tuple[str, ...]:
        """Mesh dimensions of degree > 1, outermost first."""
        return tuple(n for n in MESH_DIMS if getattr(self, n) > 1)

    @property
    def layout(self) -> str:
        """The layout's name, outermost first: 'pp2.dp2.tp2' ('' for one process)."""
        return ".".join(f"{SHORT[n]}{getattr(self, n)}" for n in self.enabled)

    def local_batch(self, batch: int) -> int:
        """Samples per data-parallel replica (or shard)."""
        if batch % self.dp:
            raise BenchError(f"batch {batch} is not divisible by dp({self.dp}); choose a multiple of {self.dp}")
        return batch // self.dp

    def coords(self, rank: int) -> dict:
        """This rank's index along every mesh dimension (row-major over MESH_DIMS, as init_device_mesh lays it)."""
        out, rest = {}, rank
        for n in reversed(MESH_DIMS):
            out[n], rest = rest % getattr(self, n), rest // getattr(self, n)
        return out

    def dp_rank(self, rank: int) -> int:
        """Which slice of the mini-batch this rank reads (the same for every pp and tp peer)."""
        c = self.coords(rank)
        return c["dp_replicate"] * self.dp_shard + c["dp_shard"]

    def build_mesh(self, device_type: str, keep: tuple[str, ...] = ()):
        """One DeviceMesh over the enabled dimensions (torchtitan builds only those too: each
        dimension is a process group per slice), and those in `keep` even at degree 1 (a pipeline
        needs its pp group when one rank holds the whole pipeline); 1-D when one parallelism alone."""
        from torch.distributed.device_mesh import init_device_mesh  # lazy: dims is pure arithmetic (configs import it)

        names = tuple(n for n in MESH_DIMS if getattr(self, n) > 1 or n in keep) or ("pp",)
        return init_device_mesh(device_type, tuple(getattr(self, n) for n in names), mesh_dim_names=names)


def check_tp(spec, degree: int):
    """tp `degree` must divide the model's width (and a GPT's heads): a BenchError naming both.
    spec: a bench.workloads.specs.ModelSpec (plain arithmetic: the planner checks it without torch)."""
    if spec.width % degree:
        raise BenchError(f"tp degree {degree} does not divide width {spec.width} of {spec.preset}")
    if spec.family == "gpt" and spec.heads % degree:
        raise BenchError(f"tp degree {degree} does not divide heads {spec.heads} of {spec.preset}")
