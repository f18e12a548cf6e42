"""`python -m edgeapp` and the `edgeapp` command: the whole app inside one Ctrl-C guard.

Ctrl-C is exit 130 with one line, wherever it lands: in a command (cli/command.exit_codes says
what was kept), while the command is looked up (cli/app.py), or while the app's modules are
still being imported (here, before anything heavy is imported).

CPython (3.8 and later) remembers a KeyboardInterrupt that went through source it compiled at
run time (`exec` of a string: every dataclass and namedtuple being defined) as unhandled, even
when it was caught, and then ends the process by SIGINT after its clean-up, whatever exit code
was asked for: a Ctrl-C landing while Dask or our own modules import gave -2, not 130. So an
interrupted run ends with its code once the clean-up (atexit handlers, registered after this
one, so run before it) is done.
"""

import atexit
import os
import sys

_exit_code: list = []  # the code the app exited with, when it was Ctrl-C's


def _end_as_interrupted() -> None:
    """The last atexit handler: an interrupted run exits 130, not by SIGINT (see above)."""
    if not _exit_code:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed, or a broken pipe
            pass
    os._exit(_exit_code[0])


def main() -> None:
    """Run the app; Ctrl-C anywhere in it is exit 130 and one line."""
    atexit.register(_end_as_interrupted)  # registered first: runs after every other handler
    try:
        from edgeapp.cli.app import main as run

        run()
    except KeyboardInterrupt:  # while edgeapp's modules import, before any command runs
        sys.stderr.write("edgeapp: interrupted\n")
        _exit_code.append(_interrupted())
        sys.exit(_exit_code[0])
    except SystemExit as e:
        if e.code == _interrupted():
            _exit_code.append(e.code)
        raise


def _interrupted() -> int:
    from edgeapp.errors import ExitCode  # imported here, not above, where Ctrl-C may land

    return int(ExitCode.INTERRUPTED)


if __name__ == "__main__":
    main()
