"""Magnum's own client scripts (lifecycle_client.py, cert_client.py) run
in processes forked from one that has imported Magnum once (issue 48).

A new Python that imports Magnum's objects, RPC API and oslo stack spends
about two CPU seconds before it does anything, and the suite runs those
scripts hundreds of times. Here each run is still a process of its own,
as fresh as a new one for everything the script does (its configuration
parsed, its RPC transport, database engine and context made, its atexit
handlers run at its end): a child forked from a server whose only state is
the modules below, imported (no configuration parsed, no connection, no
thread: `select` waits on its socket and its standard input). The script
itself runs anew in each child (`runpy`, as `__main__`), with the
environment and arguments of the call.

`run(script, args, env, timeout)` returns a `subprocess.CompletedProcess`
with the script's exit code, standard output and standard error. The server
is started on first use, one per test process, and ends with it (its
standard input closes).

    python client_pool.py serve SOCKET MODULE,... SCRIPT     (what run() starts)
"""
import atexit
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback

# Imported once, in the server (by default): what Magnum's client scripts
# import at their top and in main() (the rest of Magnum comes with these).
PRELOAD = ["magnum.common.context", "magnum.common.service", "magnum.common.rpc", "magnum.common.exception",
           "magnum.objects", "magnum.conductor.api", "oslo_messaging", "oslo_config.cfg"]


# ---- the server (its own process) ----

def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _child(conn, req):
    """In the forked child: report the pid, take the call's cgroup,
    environment, arguments and output files, run the script as __main__,
    report the exit code."""
    conn.sendall(f"{os.getpid()}\n".encode())
    if req.get("cgroup"):
        try:
            with open(os.path.join(req["cgroup"], "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            pass
    null = os.open(os.devnull, os.O_RDONLY)  # not the server's standard input
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, req["out"]), (2, req["err"])):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    sys.argv = [req["script"], *req["args"]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(req["script"])))
    code = 0
    try:
        runpy.run_path(req["script"], run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        traceback.print_exc()
        code = 1
    # What a normal interpreter exit does: atexit handlers, then buffers.
    try:
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    conn.sendall(f"{code}\n".encode())
    return code


def serve(path, preload, script):
    # What a module may read of sys.argv at import (cliff's App.NAME, the
    # program name in `openstack --version`) is the script's, as in a
    # process started to run it.
    sys.argv = [script]
    for name in preload:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reaped by the kernel
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([srv, sys.stdin], [], [])
        if sys.stdin in ready:
            if not os.read(sys.stdin.fileno(), 1):
                os._exit(0)  # the test process is gone
            continue
        conn, _ = srv.accept()
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        try:
            req = json.loads(data)
        except ValueError:
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                srv.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                code = _child(conn, req)
            finally:
                os._exit(code)
        conn.close()


# ---- the client side (the test process) ----

_servers = {}
_lock = threading.Lock()


def _socket_path(python, preload, script):
    """A server per interpreter, modules and script (what it imported is
    what a process started to run that script would have imported)."""
    key = (python, preload, script)
    with _lock:
        server = _servers.get(key)
        if server is None or server["proc"].poll() is not None:
            d = tempfile.mkdtemp(prefix="mc-client-pool-")
            path = os.path.join(d, "sock")
            proc = subprocess.Popen([python, os.path.abspath(__file__), "serve", path, ",".join(preload), script],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = proc.stdout.readline()
            if line.strip() != "ready":
                proc.kill()
                raise RuntimeError(f"client_pool server ({python} {script}) did not start: it said {line!r} "
                                   f"(its standard error is the test process's)")
            server = _servers[key] = dict(proc=proc, path=path)
            atexit.register(proc.stdin.close)
        return server["path"]


def run(script, args, env=None, timeout=180, python=None, preload=PRELOAD, cwd=None):
    """`python script *args` with `env` (default: this process's) in `cwd`
    (default: this process's), as a forked child of the server of `python`
    (default: this process's interpreter; another venv's, e.g. Magnum
    22.0.0's, gets a server of its own) that imported `preload`."""
    # Here, not at the top: the servers run this file in venvs without
    # pytest, which suite_timing imports when the suite measures itself.
    import suite_timing

    path = _socket_path(python or sys.executable, tuple(preload), os.path.abspath(script))
    with tempfile.TemporaryDirectory(prefix="mc-client-") as d:
        out, err = os.path.join(d, "stdout"), os.path.join(d, "stderr")
        for p in (out, err):
            open(p, "w").close()
        req = dict(script=os.path.abspath(script), args=list(args), out=out, err=err, cwd=cwd or os.getcwd(),
                   env=dict(os.environ if env is None else env), cgroup=suite_timing.cgroup())
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(json.dumps(req).encode() + b"\n")
            f = s.makefile("r")
            pid = int(f.readline())
            try:
                line = f.readline()
            except socket.timeout:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired([script, *args], timeout)
        # An empty line: the child died before reporting (killed).
        code = int(line) if line.strip() else -signal.SIGKILL
        with open(out, errors="replace") as f1, open(err, errors="replace") as f2:
            return subprocess.CompletedProcess([script, *args], code, f1.read(), f2.read())


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 5:
        serve(sys.argv[2], [m for m in sys.argv[3].split(",") if m], sys.argv[4])
    else:
        sys.exit(__doc__)
