"""`python -m dedup`: the same as the `dedup` command."""

from dedup.cli import entry

if __name__ == "__main__":  # spawned worker processes re-import this module
    entry()
