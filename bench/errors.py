"""Error types that the CLI turns into one-line messages with exit code 2.

Every message says what failed, the value given and what is allowed, so a user can
fix the input without reading a traceback.
"""

import difflib

USAGE_EXIT = 2


class BenchError(Exception):
    """Bad input or an impossible request. Printed as one line, exit code 2."""


class LaunchError(Exception):
    """A launch that cannot go on through no fault of the input (a rank that stopped answering):
    printed as one line naming what stopped, exit code 1."""


class SuiteError(BenchError):
    """A malformed suite file: the message names the file and the key."""


def did_you_mean(value: str, allowed) -> str:
    """' (did you mean 'x'?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown(what: str, value, allowed) -> BenchError:
    """The standard 'unknown X' error: value, suggestion, and the allowed list."""
    allowed = sorted(str(a) for a in allowed)
    return BenchError(
        f"unknown {what} '{value}'{did_you_mean(value, allowed)}; allowed: {', '.join(allowed)}"
    )
