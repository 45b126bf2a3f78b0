"""Subcommands of the ``planexec`` CLI, one module per group."""
