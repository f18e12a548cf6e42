"""The faces of edgeapp: the Typer app (app.py), shared options (options.py), one module per command.

A command parses its options, calls flows/, and renders tables, CSV or JSON; it holds no logic of
its own. Only command.exit_codes turns the typed errors of edgeapp.errors into exit codes.
"""
