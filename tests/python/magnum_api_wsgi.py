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
KeyboardInterrupt. In CI runs tempest's magnum-api refused every connection
from one moment on (each time as the suite's Python stage started) while
its process was alive and its serving loop had not ended: its listening
socket was gone from under it. A watchdog checks the socket twice a second;
if it is no longer the one it listened on, it writes what the descriptor
is now and every thread's stack, listens again on the same address and
restarts the loop (the old descriptor is left alone: it may be another
file's now). An exception that ends the loop is written with its
traceback, and the loop goes on.
"""
import faulthandler
import os
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback

ENDING = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT}


def say(text):
    sys.stdout.write(f"[magnum_api_wsgi] {text}\n")
    sys.stdout.flush()


def _ended_by():
    info = signal.sigwaitinfo(ENDING)
    try:
        with open(f"/proc/{info.si_pid}/cmdline", "rb") as f:
            sender = f.read().replace(b"\0", b" ").decode(errors="replace")[:400]
    except OSError:
        sender = "(gone)"
    say(f"{signal.Signals(info.si_signo).name} from PID {info.si_pid}: {sender}")
    os._exit(128 + info.si_signo)


def _listening(sock, inode):
    """Whether `sock` is still the listening socket of inode `inode`."""
    try:
        return (os.fstat(sock.fileno()).st_ino == inode
                and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1)
    except OSError:
        return False


def _watch(server, host, port):
    inode = os.fstat(server.socket.fileno()).st_ino
    while True:
        time.sleep(0.5)
        if _listening(server.socket, inode):
            continue
        fd = server.socket.fileno()
        try:
            now = os.readlink(f"/proc/self/fd/{fd}")
        except OSError as e:
            now = f"closed ({e.strerror})"
        say(f"the listening socket (fd {fd}) is gone: fd {fd} is {now}; every thread's stack follows; "
            f"listening again on {host}:{port}")
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        sys.stdout.flush()
        new = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        new.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        new.bind((host, port))
        new.listen(128)
        old, server.socket = server.socket, new
        old.detach()  # never closed here: the descriptor may be another file's now
        inode = os.fstat(new.fileno()).st_ino
        server.shutdown()  # the loop polls the old descriptor: restarted on the new one


def serve(server, host, port):
    """socketserver's loop on `server` for ever, with the watchdog."""
    threading.Thread(target=_watch, args=(server, host, port), name="listen-watch", daemon=True).start()
    while True:
        try:
            socketserver.BaseServer.serve_forever(server, poll_interval=0.5)
        except BaseException as e:  # noqa: B902 (KeyboardInterrupt and SystemExit included, on purpose)
            say(f"the serving loop ended with {type(e).__name__}: {e}; serving on\n{traceback.format_exc()}")


def main():
    conf, host, port = sys.argv[1:4]
    # magnum.wsgi.api reads its configuration from sys.argv when imported.
    sys.argv = ["magnum-api", "--config-file", conf]
    # Blocked before any thread starts (every thread inherits the mask),
    # taken by the one thread below.
    signal.pthread_sigmask(signal.SIG_BLOCK, ENDING)
    threading.Thread(target=_ended_by, name="ended-by", daemon=True).start()

    from magnum.wsgi import api
    from werkzeug import serving

    serve(serving.make_server(host, int(port), api.application, threaded=True), host, int(port))


if __name__ == "__main__":
    main()
