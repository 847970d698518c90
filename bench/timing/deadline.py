"""What a measured loop tells the case's wall-clock limit: how many seconds it still needs.

A case's limit is set before it starts (bench.harness.rank.case_limit_s: from the kind's estimate,
at least 60 s), when nothing is known of the link it runs on. A 64 MiB all_reduce over a 200 Mbit/s
link takes seconds per operation: the warm-up's first operation says so. The loop then calls
need(seconds) with what it still has to do, and the rank's watchdog (registered with watch())
moves its deadline to at least now + NEED_MARGIN x seconds: a slow case on a slow link completes,
a hung one still ends, a multiple of what it needs later. A limit the user set (--case-timeout-s)
is not moved (the watchdog decides). Nothing listens outside a launch (a test, the overhead tool).
"""

from typing import Callable

NEED_MARGIN = 4.0  # the limit is at least this many times what the loop says it still needs

_listeners: list[Callable[[float], None]] = []


def watch(listener: Callable[[float], None]) -> Callable[[], None]:
    """Register listener(seconds_needed); returns the function that unregisters it."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener) if listener in _listeners else None


def need(seconds: float) -> None:
    """This rank's current case needs about `seconds` more (a lower bound is fine)."""
    if seconds > 0:
        for fn in list(_listeners):
            fn(seconds)
