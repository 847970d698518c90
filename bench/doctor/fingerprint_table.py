"""The doctor's fingerprint rows as a person reads them (no torch: the summary and the report)."""


def table(results) -> list[dict]:
    """The fingerprint's rows, one per collective, placement and size (for the summary and the report)."""
    if results is None or results.empty or "doctor_test" not in results or "group_name" not in results:
        return []
    f = results[results["doctor_test"] == "collective"]
    if f.empty:
        return []
    f = f.sort_values(["collective", "group_name", "size_bytes"])
    return [{"collective": r.collective, "placement": r.group_name, "groups": int(r.groups), "group_size": int(r.group_size),
             "scope": r.group_scope, "size_bytes": int(r.size_bytes), "time_s": float(r.time_median_s),
             "busbw_gbps": float(r.busbw_gbps)} for r in f.itertuples()]


def lines(results) -> list[str]:
    rows = table(results)
    if not rows:
        return []
    out = ["# fingerprint (what `distbench plan --cluster-fingerprint` prices; ops back to back, max over ranks):"]
    for r in rows:
        out.append(f"#  {r['collective']:<15} {r['placement']:<6} {r['groups']} x {r['group_size']} ranks ({r['scope']:<5}) "
                   f"{r['size_bytes']:>10} B  {r['time_s'] * 1e3:9.3f} ms  busbw {r['busbw_gbps']:.3f} GB/s")
    return out
