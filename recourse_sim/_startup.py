"""What a stop signal does while the ``recourse-sim`` command is still starting.

Importing the package (torch, gymnasium, pandas) takes a second or more. A signal that
arrives in that time, before `recourse_sim.cli.main` installs its own handlers, ends
the command with the same one line those handlers print and nothing else: no
``KeyboardInterrupt`` traceback, no silent death. Standard library only, so that it is
in place before anything heavy is imported.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

COMMAND = "recourse-sim"
"""The console script's name (``sys.argv[0]``'s last part when it runs)."""


def stop_while_starting(signum: int, frame) -> None:
    """Nothing is open yet: say so in one line and end at once (128 + signal number)."""
    name = signal.Signals(signum).name
    os.write(2, f"error: stopped by {name} while starting\n".encode())
    os._exit(128 + signum)


def install_if_command_line() -> None:
    """`stop_while_starting` for SIGINT, SIGTERM and SIGHUP, when this process is the
    ``recourse-sim`` command (a library user's handlers are never touched)."""
    if not sys.argv or os.path.basename(sys.argv[0]) != COMMAND:
        return
    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), stop_while_starting)
