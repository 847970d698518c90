"""Live terminal output on rank 0 while a launch runs: each kind has its printer (in its folder's
summary.py), fed by the harness's events (start, unit, done); this is what they share. The closing
summary comes from the stored run, so it is the same under every launcher and in `distbench show`."""

import sys



class Printer:
    def __init__(self, out=None):
        self.out = out or sys.stdout

    def p(self, line: str = ""):
        print(line, file=self.out, flush=True)

    def communicator(self, launch, prefix: str):
        self.p(f"# {prefix}{launch.describe()}; communicator: init_process_group {launch.init_s:.3f} s, "
               f"first collective {launch.first_s * 1e3:.1f} ms (excluded from every case)")
