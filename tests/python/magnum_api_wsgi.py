"""Serve Magnum's WSGI application (`magnum.wsgi.api`), the way uwsgi or
mod_wsgi deployments run magnum-api: objects are read from and written to
the database directly (no indirection through the conductor), RPC still
goes to the conductor. Run with the magnum-api venv's Python:

    python magnum_api_wsgi.py CONFIG_FILE HOST PORT

A signal that ends it is written to its output with the sending process
(its PID and command line), so that a test whose magnum-api went away can
say who ended it (SIGKILL cannot be caught: the test then sees -9).

The serving loop is socketserver's own, not werkzeug's `run_simple`, whose
`serve_forever` closes the listening socket on any exception and swallows
KeyboardInterrupt, leaving a live process that refuses connections and
says nothing: here an exception that ends the loop is written to the
output with its traceback, and the loop goes on, on the same socket.
"""
import os
import signal
import socketserver
import sys
import threading
import traceback

conf, host, port = sys.argv[1:4]
# magnum.wsgi.api reads its configuration from sys.argv when imported.
sys.argv = ["magnum-api", "--config-file", conf]

ENDING = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}
# Blocked before any thread starts (every thread inherits the mask), taken
# by the one thread below.
signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)


def _ended_by():
    info = signal.sigwaitinfo(ENDING)
    try:
        with open(f"/proc/{info.si_pid}/cmdline", "rb") as f:
            sender = f.read().replace(b"\0", b" ").decode(errors="replace")[:400]
    except OSError:
        sender = "(gone)"
    sys.stdout.write(f"[magnum_api_wsgi] {signal.Signals(info.si_signo).name} from PID {info.si_pid}: "
                     f"{sender}\n")
    sys.stdout.flush()
    os._exit(128 + info.si_signo)


threading.Thread(target=_ended_by, name="ended-by", daemon=True).start()

from magnum.wsgi import api  # noqa: E402
from werkzeug import serving  # noqa: E402

server = serving.make_server(host, int(port), api.application, threaded=True)
while True:
    try:
        socketserver.BaseServer.serve_forever(server, poll_interval=0.5)
    except BaseException as e:  # noqa: B902 (KeyboardInterrupt and SystemExit included, on purpose)
        sys.stdout.write(f"[magnum_api_wsgi] the serving loop ended with {type(e).__name__}: {e}; "
                         f"serving on\n{traceback.format_exc()}")
        sys.stdout.flush()
