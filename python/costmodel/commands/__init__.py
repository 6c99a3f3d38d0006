"""Subcommands of the `costmodel` CLI, one module each (see costmodel.cli)."""


class CommandError(Exception):
    """A user mistake in a `costmodel` subcommand: printed as one line, exit 1."""
