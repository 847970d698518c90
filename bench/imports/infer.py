"""Which nccl-tests program printed a results table that does not say.

Most published nccl-tests logs never name their collective: nccl-tests before 2.17 prints no
`# Collective test starting` line, and a log redirected from `all_reduce_perf > out.txt` carries
no command. The table itself still tells, from three facts nccl-tests writes into every row:

- whether it reduces: the `redop` column holds an operation (sum, prod, max, min, avg,
  premulsum) only for all_reduce, reduce_scatter and reduce (src/*.cu pass `-1`/"none" otherwise);
- whether it has a root: the `root` column is >= 0 only for broadcast, reduce, gather, scatter;
- how `size` relates to `count` x the type's bytes: `size` is max(send, receive bytes) and `count`
  the per-call count (`paramcount`, src/common.cu writeBenchmarkLinePreamble), so size = count x
  bytes for all_reduce, broadcast, reduce, sendrecv and size = count x bytes x ranks for
  all_gather, reduce_scatter, alltoall, gather, scatter (each src/<coll>.cu GetCollByteCount);
- and, as a check, busbw / algbw: nccl-tests' bus factor of the collective at the log's world
  size (doc/PERFORMANCE.md; each src/<coll>.cu GetBw at NVIDIA/nccl-tests HEAD).

all_gather and alltoall (and gather and scatter) print identical tables: for those the file's
name decides, and where it does not, the reader refuses and says what it tried.
"""

import re
from dataclasses import dataclass

from bench.timing.busbw import FACTORS

# program: (reduces, rooted, size = count x bytes x ranks, bus factor at n ranks: bench.timing.busbw)
SIGNATURES = {program: (*facts, FACTORS[program]) for program, facts in {
    "all_reduce": (True, False, False),
    "reduce_scatter": (True, False, True),
    "reduce": (True, True, False),
    "all_gather": (False, False, True),
    "alltoall": (False, False, True),
    "sendrecv": (False, False, False),
    "broadcast": (False, True, False),
    "gather": (False, True, True),
    "scatter": (False, True, True),
}.items()}
# nccl-tests type name -> bytes per element (src/common.cu wordSize)
WORD_BYTES = {"int8": 1, "char": 1, "uint8": 1, "int32": 4, "int": 4, "uint32": 4, "int64": 8, "uint64": 8,
              "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
REDUCING_OPS = ("sum", "prod", "max", "min", "avg", "premulsum", "mulsum")
PRINTED = 0.005  # algbw and busbw are printed with 2 decimals (getFloatStr "%6.2f"): +-0.005 each
# file-name spellings, longest first so that 'all_reduce' is not read as 'reduce'
_NAME_WORDS = [("reduce_scatter", "reduce_scatter"), ("reducescatter", "reduce_scatter"),
               ("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("all_gather", "all_gather"),
               ("allgather", "all_gather"), ("alltoall", "alltoall"), ("all_to_all", "alltoall"),
               ("broadcast", "broadcast"), ("sendrecv", "sendrecv"), ("reduce", "reduce"), ("gather", "gather"),
               ("scatter", "scatter")]


@dataclass(frozen=True, kw_only=True)
class Table:
    """The facts of one results table the inference reads (size-0 rows already left out)."""

    world: int
    ops: frozenset  # redop values printed ("" where the column is blank or absent)
    roots: frozenset  # root values printed (-1 where absent)
    rows: tuple  # (size_bytes, count, type, algbw_gbps, busbw_gbps) of each non-empty row


def _fits(program: str, t: Table) -> tuple[bool, str]:
    """Does `program` print table t? (fits, the fact that rules it out)."""
    reduces, rooted, times_ranks, factor = SIGNATURES[program]
    if reduces != any(op in REDUCING_OPS for op in t.ops):
        return False, "redop " + ("holds an operation" if not reduces else "holds none")
    if rooted != any(r >= 0 for r in t.roots):
        return False, "root " + (">= 0" if not rooted else "is -1 or absent")
    for size, count, typ, _, _ in t.rows:
        if count and typ in WORD_BYTES and t.world > 1:
            per = size / (count * WORD_BYTES[typ])
            if abs(per - (t.world if times_ranks else 1)) > 1e-9:
                return False, f"size / (count x bytes) = {per:g}"
            break
    big = max(t.rows, key=lambda r: r[3], default=None)  # the largest algbw: the best-resolved ratio
    if big and big[3] >= 1.0:
        f = factor(t.world)
        if abs(big[4] - f * big[3]) > PRINTED * (1 + f) + 1e-9:
            return False, f"busbw / algbw = {big[4] / big[3]:.4f}, not {f:.4f}"
    return True, ""


def candidates(t: Table) -> list[str]:
    """The programs whose output the table could be."""
    return [p for p in SIGNATURES if _fits(p, t)[0]]


def describe(t: Table) -> str:
    """The facts read, for a note: 'redop sum, root -1, size = count x 4 B, busbw / algbw 1.8750 at 16 ranks'."""
    parts = [f"redop {'/'.join(sorted(o or 'blank' for o in t.ops)) or 'absent'}",
             f"root {'/'.join(str(r) for r in sorted(t.roots))}"]
    for size, count, typ, _, _ in t.rows:
        if count and typ in WORD_BYTES:
            parts.append(f"size / (count x {WORD_BYTES[typ]} B) = {size / (count * WORD_BYTES[typ]):g}")
            break
    big = max(t.rows, key=lambda r: r[3], default=None)
    if big and big[3] >= 1.0:
        parts.append(f"busbw / algbw = {big[4] / big[3]:.4f} at {big[0]} B")
    return ", ".join(parts) + f", {t.world} ranks"


def from_file_name(name: str, among) -> list[str]:
    """The programs among `among` that the file name spells (longest spelling first)."""
    low = name.lower().replace("-", "_")
    found = []
    for word, prog in _NAME_WORDS:
        if re.search(rf"(?<![a-z]){word}(?![a-z])", low) and prog not in found:
            found.append(prog)
            low = low.replace(word, " ")
    return [p for p in found if p in among]
