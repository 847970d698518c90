"""`distbench report`, `distbench show`, `distbench runs`: read stored runs, never re-run."""


def add_parser(sub):
    """Adds this module's subcommands (filled in by the reports work)."""
