"""What a person reads of a doctor run: the pair matrix per class, the compute probe, the groups
against their expectation, and the verdict (the live run, `distbench show` and the report say the
same: every line is a function of the stored run)."""

import math

import numpy as np
import pandas as pd

from bench.doctor.exclude import exclude_lines
from bench.doctor.fingerprint_table import lines as fingerprint_lines
from bench.doctor.verdict import (Thresholds, compute_table, fmt_bw, fmt_s, group_table, latency_judged,
                                  oversubscribed_rows, pair_matrix, verdict_of)
from bench.doctor.schedule import INTER, nodes_of, rounds_for
from bench.report.terminal import Printer

MATRIX_MAX = 16  # worlds up to this print the bandwidth matrix itself


def thresholds_of(meta: dict, cfg=None) -> Thresholds:
    """The verdict's thresholds: the run's config (cfg when given, else meta.json's)."""
    src = cfg.thresholds() if cfg is not None else (meta or {}).get("config", {})
    return Thresholds(**{k: (src[k] if k in ("latency_verdict", "compute_statistic") else float(src[k]))
                         for k in Thresholds.__dataclass_fields__ if k in src})


def _matrix_lines(pairs: pd.DataFrame) -> list[str]:
    ranks = sorted(set(pairs["src"]) | set(pairs["dst"]))
    if not ranks or len(ranks) > MATRIX_MAX:
        return []
    bw = pairs.set_index(["src", "dst"])["bw"]
    lines = ["# bandwidth MB/s, row = sender, column = receiver:",
             "#" + " " * 6 + "".join(f"{d:>8}" for d in ranks)]
    for s in ranks:
        cells = "".join(f"{bw[(s, d)] / 1e6:>8.1f}" if (s, d) in bw.index else f"{'-':>8}" for d in ranks)
        lines.append(f"# {s:>5}" + cells)
    return lines


def verdict_lines(suspects) -> list[str]:
    if not suspects:
        return ["# verdict: no suspect"]
    return [f"# verdict: {len(suspects)} suspect(s), worst first:",
            *(f"#  {i}. {s.evidence}" for i, s in enumerate(suspects, 1))]


def doctor_summary(run) -> str:
    res = run.tables.get("results")
    pairs = pair_matrix(res)
    th = thresholds_of(run.meta)
    comp = compute_table(res, th.compute_statistic)
    groups = group_table(res, pairs)
    nodes = sorted(set(pairs["src_node"]) | set(pairs["dst_node"]) | set(comp["node"]))
    ranks = set(pairs["src"]) | set(pairs["dst"]) | set(comp["rank"])
    out = [f"# doctor: {len(ranks)} rank(s) on {len(nodes)} node(s) ({', '.join(nodes)})"]
    for cls, c in pairs.groupby("cls"):
        out.append(f"# {cls}-node pairs: {len(c)} ordered; bandwidth median {fmt_bw(float(np.median(c['bw'])))} "
                   f"(min {fmt_bw(c['bw'].min())}, max {fmt_bw(c['bw'].max())}); latency median "
                   f"{fmt_s(float(np.median(c['lat'])))} one-way, {int(c['flows'].max())} flow(s) per node link")
    out += _matrix_lines(pairs)
    if not comp.empty:
        out.append(f"# compute ({th.compute_statistic} of each rank's repetitions): matmul median "
                   f"{fmt_s(float(np.median(comp['t'])))} over {len(comp)} ranks "
                   f"(fastest {fmt_s(comp['t'].min())} rank {int(comp.loc[comp['t'].idxmin(), 'rank'])}, slowest "
                   f"{fmt_s(comp['t'].max())} rank {int(comp.loc[comp['t'].idxmax(), 'rank'])})")
    for g in groups.itertuples():
        exp = "no expectation" if not math.isfinite(g.expected_s) else \
            f"expected {fmt_s(g.expected_s)} from the pair matrix ({g.ratio:.2f}x)"
        out.append(f"# group {g.group} [{g.ranks}] all_reduce {g.size} B: {fmt_s(g.t)}, {exp}")
    out.append(f"# thresholds: {th.mad_k:g} MADs and {th.min_shortfall:.0%} below (bandwidth; nodes and node links "
               f"{th.node_shortfall:.0%}), "
               f"+{th.latency_excess:.0%} (latency), +{th.compute_excess:.0%} (compute)"
               + (f", groups {th.group_factor:g}x" if th.group_factor > 0 else ", groups shown only")
               + ("" if latency_judged(th, oversubscribed_rows(res)) else
                  "; latency shown only (ranks shared cores: a round trip waits for the scheduler)"))
    out += fingerprint_lines(res)
    out += verdict_lines(verdict_of(res, th))
    out += exclude_lines(run.meta, getattr(run, "dir", "RUN_DIR"))
    return "\n".join(out)


class DoctorLive(Printer):
    """One line as the launch starts and one per finished unit."""

    def start(self, launch, units):
        self.communicator(launch, "doctor: ")
        names, nodes = nodes_of(launch.hosts)
        rounds = rounds_for(nodes)
        inter = sum(r.link_class == INTER for r in rounds)
        self.p(f"# {len(names)} node(s) by host name, {len(rounds)} round(s) of disjoint pairs: {inter} inter-node, "
               f"{len(rounds) - inter} intra-node; each pair both ways")

    def unit(self, unit, index: int, total: int):
        self.p(f"# [{index}/{total}] {unit.name} ...")

    def done(self, tables: dict):
        rows = tables.get("results", [])
        if rows:
            self.p(f"#   {len(rows)} row(s) ({rows[0].get('doctor_test')})")
