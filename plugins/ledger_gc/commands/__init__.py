"""The ``ledgergc`` subcommands: parse a command's flags, run the library, print.

The layer just under ``cli`` (which builds the parser and maps errors to exit codes);
nothing in the library imports a command back.
"""
