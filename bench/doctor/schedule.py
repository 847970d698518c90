"""The doctor's round schedule (pure): every unordered pair of ranks in exactly one round, no
rank twice in a round, each pair then measured in both directions (a -> b, then b -> a), so
every ordered pair exactly once.

Node-aware circle method. With M nodes: the inter-node rounds run the circle method over the
NODES (M - 1 node rounds; an odd M leaves one node out of each of its M rounds); within a node
pair (A, B) with ranks a_0.. and b_0.., sub-round s pairs a_i with b_((i + s) mod |B|) (A the
smaller node), so the |A| x |B| pairs take max(|A|, |B|) sub-rounds. The intra-node rounds run the
circle method within every node at once. With M nodes of k ranks, M and k even, that is
(M - 1) k + (k - 1) = N - 1 rounds, as many as the plain circle method over N ranks.

Why node-aware: in one round every flow that crosses a given node pair shares its nodes' links
with the same number of concurrent flows (|A| flows leave A in a phase), so the inter-node
measurements are comparable with each other. A plain circle over ranks mixes one and two flows
per node link from round to round, which looks like slow links.
"""

from dataclasses import dataclass

INTRA, INTER = "intra", "inter"


@dataclass(frozen=True)
class Round:
    index: int
    link_class: str  # intra | inter: every pair of a round is of one class
    pairs: tuple[tuple[int, int], ...]  # (a, b): a -> b is measured first, then b -> a
    flows: int  # concurrent flows per node link in one phase (|A| for inter rounds; 1 for intra)

    def partner(self, rank: int) -> tuple[int, bool] | None:
        """(the other rank, this rank is `a`) or None when this rank waits out the round."""
        for a, b in self.pairs:
            if rank == a:
                return b, True
            if rank == b:
                return a, False
        return None


def circle(n: int) -> list[list[tuple[int, int]]]:
    """The circle method (round-robin tournament) over 0..n-1: n - 1 rounds for an even n, n for an
    odd n (one index sits out each round); every unordered pair once, every index at most once per
    round. Position 0 stays, the others rotate."""
    if n < 2:
        return []
    slots = list(range(n)) + ([None] if n % 2 else [])
    m = len(slots)
    rounds = []
    for _ in range(m - 1):
        pairs = [(slots[i], slots[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(p), max(p)) for p in pairs if None not in p])
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return rounds


def node_pair_subrounds(a_ranks: list[int], b_ranks: list[int]) -> list[list[tuple[int, int]]]:
    """Every (a, b) of two nodes once, in max(|A|, |B|) sub-rounds with no rank twice in one."""
    flip = len(a_ranks) > len(b_ranks)
    small, big = (b_ranks, a_ranks) if flip else (a_ranks, b_ranks)
    out = []
    for s in range(len(big)):
        pairs = [(x, big[(i + s) % len(big)]) for i, x in enumerate(small)]
        out.append([(y, x) if flip else (x, y) for x, y in pairs])
    return out


def rounds_for(nodes: list[list[int]]) -> list[Round]:
    """The rounds for ranks grouped by node (`nodes[i]`: the ranks of node i, in rank order)."""
    nodes = [list(n) for n in nodes if n]
    out: list[Round] = []
    for node_round in circle(len(nodes)):
        subs = [node_pair_subrounds(nodes[i], nodes[j]) for i, j in node_round]
        for s in range(max(len(x) for x in subs)):
            pairs = tuple(p for x in subs if s < len(x) for p in x[s])
            flows = max(min(len(nodes[i]), len(nodes[j])) for i, j in node_round)
            out.append(Round(index=len(out), link_class=INTER, pairs=pairs, flows=flows))
    per_node = [[[(n[i], n[j]) for i, j in r] for r in circle(len(n))] for n in nodes]
    for s in range(max((len(x) for x in per_node), default=0)):
        pairs = tuple(p for x in per_node if s < len(x) for p in x[s])
        out.append(Round(index=len(out), link_class=INTRA, pairs=pairs, flows=1))
    return out


def nodes_of(hosts: list[str]) -> tuple[list[str], list[list[int]]]:
    """(node names, ranks of each node) from every rank's host name, nodes in order of their
    first rank (rank 0's node first)."""
    names: list[str] = []
    ranks: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        if h not in ranks:
            names.append(h)
            ranks[h] = []
        ranks[h].append(r)
    return names, [ranks[n] for n in names]
