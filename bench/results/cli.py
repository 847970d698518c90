"""`distbench compare`, `distbench baseline`, `distbench gate`, `distbench export`: read stored runs."""


def add_parser(sub):
    """Adds this module's subcommands (filled in by the regression-gate work)."""
