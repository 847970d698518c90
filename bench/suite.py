"""TOML suite files -> frozen config dataclasses (stdlib tomllib), with CLI overrides.

A suite file is flat: `kind = "collectives"` plus the fields of that kind's config. Every key
is checked against the config's fields (unknown keys and wrong types name the file and the key),
and a CLI option can override any field. List-valued fields are matrix axes.
"""

import dataclasses
import math
import typing
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from bench.errors import BenchError, SuiteError, did_you_mean


INT64_MAX = 2**63 - 1
MAX_SECONDS = 365 * 24 * 3600  # any duration option; beyond it timedelta / sleep overflow or it is a typo


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Fields every benchmark kind's config has; each is also a CLI option (bench.cli.add_common)."""

    backend: str = "auto"  # auto: nccl with CUDA, else gloo
    timeout_s: float = 300.0  # process-group timeout: a hang fails after this
    out: str = "results"  # results root: <out>/<name>/<run_id>/
    telemetry: bool = True  # NVML + host sampling during every case (--no-telemetry: off)
    telemetry_interval_s: float = 0.1  # seconds between telemetry samples
    case_timeout_s: float = 0.0  # wall-clock limit of one case on every rank; 0: derived from its budget
    keep_going: bool = False  # after a failed case, continue in a fresh launch from the next one

    empty_ok: typing.ClassVar[tuple[str, ...]] = ()  # list fields with a non-empty default that may be empty

    def __post_init__(self):
        for f in dataclasses.fields(self):  # NaN / inf pass `> 0` checks and crash later (timedelta, sleep)
            v = getattr(self, f.name)
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, float) and not math.isfinite(x):
                    raise BenchError(f"{f.name} {x} must be a finite number")
                if isinstance(x, int) and not isinstance(x, bool) and abs(x) > INT64_MAX:  # torch, parquet: int64
                    raise BenchError(f"{f.name} {x} is absurd: at most {INT64_MAX}")
            if isinstance(v, tuple) and not v and f.default not in ((), dataclasses.MISSING) \
                    and f.name not in self.empty_ok:  # an empty axis: a run of no cases
                raise BenchError(f"{f.name}: give at least one value (default: {','.join(map(str, f.default))})")
        for name in ("timeout_s", "telemetry_interval_s", "case_timeout_s"):
            if getattr(self, name) > MAX_SECONDS:
                raise BenchError(f"{name} {getattr(self, name)} is absurd: at most {MAX_SECONDS} s (one year)")
        for name, v in (("timeout_s", self.timeout_s), ("telemetry_interval_s", self.telemetry_interval_s)):
            if not v > 0:
                raise BenchError(f"{name} {v} must be > 0")
        if not self.case_timeout_s >= 0:
            raise BenchError(f"case_timeout_s {self.case_timeout_s} must be >= 0 (0: derived from the budget)")


def at_least(name: str, values, lo: int = 1):
    """Each of `values` (one value or a tuple) must be >= lo."""
    for v in values if isinstance(values, tuple) else (values,):
        if v < lo:
            raise BenchError(f"{name} {v} must be >= {lo}")


def _kind_of(tp) -> tuple[type, type | None]:
    """(container, element) for a field annotation: (tuple, str), (int, None) ..."""
    origin = typing.get_origin(tp)
    if origin is tuple:
        return tuple, typing.get_args(tp)[0]
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], None
    return tp, None


def _coerce(value, tp, where: str):
    container, elem = _kind_of(tp)
    if container is tuple:
        items = value if isinstance(value, list) else [value]
        return tuple(_coerce(v, elem, where) for v in items)
    if container is bool:
        if not isinstance(value, bool):
            raise SuiteError(f"{where}: expected true or false, got {value!r}")
        return value
    if container is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SuiteError(f"{where}: expected an integer, got {value!r}")
        return value
    if container is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SuiteError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if container is str:
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise SuiteError(f"{where}: expected a string, got {value!r}")
        return str(value)
    return value


def load_suite(path, config_cls, kind: str, overrides: dict | None = None):
    """Read `path` into config_cls, then apply `overrides` (field -> value, None = not given)."""
    values: dict = {}
    if path is not None:
        path = Path(path)
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise BenchError(f"suite file '{path}' not found") from None
        except tomllib.TOMLDecodeError as e:
            raise SuiteError(f"suite file '{path}': malformed TOML: {e}") from None
        except UnicodeDecodeError as e:
            raise SuiteError(f"suite file '{path}': not UTF-8 text ({e.reason} at byte {e.start})") from None
        except OSError as e:  # a directory, no permission, ...
            raise BenchError(f"suite file '{path}' cannot be read: {e.strerror or e}") from None
        file_kind = raw.pop("kind", kind)
        if file_kind != kind:
            raise SuiteError(f"suite file '{path}': key 'kind' is '{file_kind}', this command runs '{kind}' suites")
        values = _check(raw, config_cls, str(path))
    try:
        cfg = config_cls(**values)  # the file's own values, so its errors can name the file
    except SuiteError:
        raise
    except BenchError as e:
        if path is None:
            raise
        raise SuiteError(f"suite file '{path}': {e}") from None
    fields = {f.name for f in dataclasses.fields(config_cls)}
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    for k in given:
        if k not in fields:
            raise BenchError(f"unknown option '{k}'")
    return dataclasses.replace(cfg, **given) if given else cfg


def _check(raw: dict, config_cls, where: str) -> dict:
    hints = typing.get_type_hints(config_cls)
    names = [f.name for f in dataclasses.fields(config_cls)]
    out = {}
    for key, value in raw.items():
        if key not in hints or key not in names:
            raise SuiteError(f"suite file '{where}': unknown key '{key}'{did_you_mean(key, names)}; "
                             f"allowed: {', '.join(names)}")
        out[key] = _coerce(value, hints[key], f"suite file '{where}': key '{key}'")
    return out


def split_list(text: str | None) -> tuple[str, ...] | None:
    """'a,b' -> ('a', 'b'); None stays None (not given)."""
    if text is None:
        return None
    return tuple(s.strip() for s in str(text).split(",") if s.strip())


def int_list(text: str | None, what: str) -> tuple[int, ...] | None:
    items = split_list(text)
    if items is None:
        return None
    try:
        return tuple(int(s) for s in items)
    except ValueError:
        raise BenchError(f"bad {what} '{text}': expected comma-separated integers, e.g. 2,4") from None


# ---- suite resolution: a name (a shipped suite) or a path ---------------------------------------

# The suites ship inside the package (bench/suites, a link to the checkout's top-level suites/,
# copied into wheels as package data); a checkout without the link still finds suites/ beside bench/.
_ROOT = Path(__file__).resolve().parents[1]
SUITE_DIRS = (Path(__file__).resolve().parent / "suites",
              *((_ROOT / "suites",) if (_ROOT / "pyproject.toml").is_file() else ()))


def shipped_suites(kind: str | None = None) -> dict[str, Path]:
    """{name: file} of the shipped suites (of `kind`, when given), first directory wins."""
    out: dict[str, Path] = {}
    for d in SUITE_DIRS:
        if not d.is_dir():
            continue
        for f in sorted(d.glob("*.toml")):
            if f.stem in out:
                continue
            if kind is not None:
                try:
                    file_kind = tomllib.loads(f.read_text()).get("kind", kind)
                except (OSError, tomllib.TOMLDecodeError):
                    continue
                if file_kind != kind:
                    continue
            out[f.stem] = f
    return out


def resolve_suite(name_or_path, kind: str) -> Path:
    """--suite's value -> a file. An existing path is itself (relative to the working directory);
    otherwise a bare name ('collectives', 'collectives-full', with or without .toml) is a shipped
    suite; None is the kind's default suite (the one named like the kind). A name that is not
    shipped, or a path that does not exist, is bad input listing the shipped names."""
    text = kind if name_or_path is None else str(name_or_path)
    p = Path(text).expanduser()
    if p.exists():
        return p
    name = p.name[:-5] if p.name.endswith(".toml") else p.name
    looks_like_path = len(p.parts) > 1 or text.startswith((".", "~"))
    mine = shipped_suites(kind)
    if not looks_like_path and name in mine:
        return mine[name]
    names = sorted(mine)
    listed = ", ".join(names) if names else "none found"
    if looks_like_path:
        raise BenchError(f"suite file '{text}' not found; shipped {kind} suites (by name): {listed}")
    other = shipped_suites(None)
    if name in other:
        raise BenchError(f"suite '{name}' is not a {kind} suite; shipped {kind} suites: {listed}")
    raise BenchError(f"unknown suite '{name}'{did_you_mean(name, names)}; shipped {kind} suites: {listed} "
                     f"(or give a path to a .toml file)")
