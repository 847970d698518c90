"""The gate's rules: tolerances per suite and per case (docs/gate.md), from a rules file."""

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.errors import BenchError
from bench.suite import tomllib
from bench.units import parse_size


@dataclass(frozen=True)
class Rules:
    """Gate settings. A rules file (TOML, e.g. suites/smoke.gate.toml) sets any field; its
    [cases] table maps a case pattern (fnmatch on 'case_id@size_bytes' or on 'case_id') to a
    tolerance, e.g. `"broadcast.*@4194304" = 0.2`."""

    tolerance: float = 0.10  # fraction worse that is never a regression
    small_tolerance: float = 0.25  # the same below small_bytes (latency-bound messages)
    small_bytes: int = 1 << 20
    geomean_tolerance: float = 0.10  # per kind, on the geometric mean of ratios
    alpha: float = 0.01  # one-sided: chance that an unchanged launch falls outside the band
    screen_alpha: float = 0.10  # the gate's first look: which cases to re-run (a false flag costs one launch)
    max_band: float = 0.50  # a kind's or group's band wider than this: `unstable` (a 1.5x slowdown could not clear it)
    max_case_band: float = 1.0  # a case's band wider than this: `unstable` (a 2x slowdown of one case must clear it)
    cases: dict = field(default_factory=dict)  # pattern -> tolerance
    source: str = "defaults"

    def tolerance_for(self, case_id: str, size_bytes) -> float:
        size = _int_or_none(size_bytes)
        for pat, tol in self.cases.items():
            if fnmatch.fnmatchcase(f"{case_id}@{size}", pat) or fnmatch.fnmatchcase(str(case_id), pat):
                return float(tol)
        if size is not None and 0 < size < self.small_bytes:
            return self.small_tolerance
        return self.tolerance

    @classmethod
    def load(cls, path) -> "Rules":
        path = Path(path)
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise BenchError(f"gate rules file '{path}' not found") from None
        except tomllib.TOMLDecodeError as e:
            raise BenchError(f"gate rules file '{path}': malformed TOML: {e}") from None
        raw = dict(raw.get("gate", raw))
        out = {}
        allowed = ("tolerance", "small_tolerance", "small_bytes", "geomean_tolerance", "alpha", "screen_alpha",
                   "max_band", "max_case_band", "cases")
        for k, v in raw.items():
            if k not in allowed:
                raise BenchError(f"gate rules file '{path}': unknown key '{k}'; allowed: {', '.join(allowed)}")
            if k == "small_bytes":
                v = parse_size(str(v))
            elif k == "cases":
                if not isinstance(v, dict) or not all(isinstance(t, (int, float)) for t in v.values()):
                    raise BenchError(f"gate rules file '{path}': [cases] maps a case pattern to a tolerance number")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise BenchError(f"gate rules file '{path}': key '{k}' must be a number >= 0, got {v!r}")
            out[k] = v
        for k in ("alpha", "screen_alpha"):
            if not 0 < float(out.get(k, getattr(cls, k))) < 0.5:
                raise BenchError(f"gate rules file '{path}': {k} must be in (0, 0.5)")
        return cls(**out, source=str(path))


def _int_or_none(v):
    try:
        return None if v is None or pd.isna(v) else int(v)
    except (TypeError, ValueError):
        return None
