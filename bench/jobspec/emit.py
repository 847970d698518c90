"""A small block-style YAML writer for the job files (distbench does not depend on a YAML library).

Mappings and lists nest by two spaces; a multi-line string is a literal block (`|`); any other string is
plain only where YAML 1.1 and 1.2 both read it back as that same string (never a number, a boolean or
null: `"8"`, `"true"`, `"on"` stay quoted), else a double-quoted JSON string (valid YAML). tests/test_jobspec.py
reads every file back with PyYAML and compares it with the data written.
"""

import json
import re

# names, paths and options (-m, --nnodes); nothing with ':', '#', '{', quotes or spaces; never a number
PLAIN = re.compile(r"(?:[A-Za-z_/]|--?[A-Za-z])[A-Za-z0-9_./-]*")
SPECIAL_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}  # YAML 1.1 booleans and null


def scalar(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise TypeError(f"no YAML form for {type(value).__name__}")
    if PLAIN.fullmatch(value) and value.lower() not in SPECIAL_WORDS:
        return value
    return json.dumps(value)


def _block(text: str, indent: int) -> str | None:
    """A literal block for a multi-line string, or None where one cannot hold it exactly."""
    if "\n" not in text or text.endswith("\n\n") or text[:1] in (" ", "\t") \
            or any(line != line.rstrip() for line in text.splitlines()):
        return None
    pad = " " * indent
    body = "\n".join(pad + line if line else "" for line in text.rstrip("\n").split("\n"))
    return ("|" if text.endswith("\n") else "|-") + "\n" + body


def dump(data, indent: int = 0) -> str:
    """`data` (dicts, lists, str, int, bool) as YAML text ending in a newline."""
    return "\n".join(_lines(data, indent)) + "\n"


def _lines(data, indent: int) -> list[str]:
    pad = " " * indent
    out = []
    if isinstance(data, dict):
        for key, value in data.items():
            out += _entry(f"{pad}{scalar(key)}:", value, indent)
        return out
    for item in data:  # a list
        inner = _lines(item, indent + 2) if isinstance(item, (dict, list)) and item else None
        if inner:
            out.append(f"{pad}- {inner[0][indent + 2:]}")
            out += inner[1:]
        else:
            out += _entry(f"{pad}-", item, indent)
    return out


def _entry(head: str, value, indent: int) -> list[str]:
    if isinstance(value, (dict, list)):
        if not value:
            return [f"{head} {'{}' if isinstance(value, dict) else '[]'}"]
        return [head, *_lines(value, indent + 2)]
    if isinstance(value, str):
        block = _block(value, indent + 2)
        if block is not None:
            return [f"{head} {block}"]
    return [f"{head} {scalar(value)}"]
