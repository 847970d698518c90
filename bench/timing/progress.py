"""The one progress line: `[n/N] <what> done, elapsed E s, ETA R s` on stderr as steps finish.

Used by the harness (rank 0, one step per finished case) and by every loop of fresh launches (the
A/B gate's pairs, bisect's pairs, a baseline's repeats, plan's calibration and validation launches).
The ETA is the mean time of the steps done so far times the steps left.
"""

import sys
import time


class Progress:
    """Elapsed time and an ETA on stderr as steps finish: on a terminal one line rewritten in place;
    elsewhere (a CI log, a pipe, `| tee`) one plain line per finished step, naming it. plain=True
    always writes the plain lines (a loop of launches, whose own output comes between them)."""

    def __init__(self, total: int, plain: bool = False):
        self.total, self.done, self.t0 = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty() and not plain

    def tick(self, key: str | None = None):
        self.done += 1
        el = time.monotonic() - self.t0
        eta = el / self.done * (self.total - self.done)
        if not self.tty:
            case = f" {key} done," if key else ""
            print(f"[{self.done}/{self.total}]{case} elapsed {el:.0f} s, ETA {eta:.0f} s", file=sys.stderr, flush=True)
            return
        # cleared (ESC [K) and written, then the cursor back at the line's start: whatever is printed
        # next (the case's row on stdout) overwrites the line instead of following it on the same line
        end = "\n" if self.done == self.total else "\r"
        print(f"\r\x1b[K[{self.done}/{self.total}] elapsed {el:.0f} s, ETA {eta:.0f} s", end=end, file=sys.stderr,
              flush=True)
