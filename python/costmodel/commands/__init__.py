"""Subcommands of the `costmodel` CLI, one module each (see costmodel.cli)."""


class CommandError(Exception):
    """A user mistake in a `costmodel` subcommand: printed as one line, exit 1."""


def partition_if_needed(module, diags, notes: list) -> list[str]:
    """A sharded module that is not partitioned yet: partition it (what predict does), so
    that a report (`costmodel memory`, `costmodel kernels`) sees one device's program. A
    note says so. Returns propagate-shardings' warnings, rendered (for stderr)."""
    from ..partitioning import find_unpartitioned_sharding

    if find_unpartitioned_sharding(module) is None:
        return []
    from ..passes import PassError, PassSession, get_pass, parse_options

    prop = get_pass("propagate-shardings")
    first = len(diags.diagnostics)
    try:
        prop.run(module, parse_options(prop, ""), PassSession(diagnostics=diags))
    except PassError:
        errors = [d for d in diags.diagnostics if d.severity == "error"]
        if errors and errors[0].message.startswith("propagate-shardings:"):
            raise CommandError(errors[0].render()) from None
        raise CommandError(
            "propagate-shardings: " + (errors[0].render() if errors else "failed on the sharded module")
        ) from None
    notes.append("the module was sharded but not partitioned: analysed after propagate-shardings (one device)")
    return [d.render() for d in diags.diagnostics[first:] if d.severity == "warning"]
