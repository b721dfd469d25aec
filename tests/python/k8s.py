"""Real Kubernetes control planes for the Python tests (`scripts/k8s-up.sh`:
kube-apiserver + kube-controller-manager v1.28.7, etcd, the CRDs of one CAPI
line, from `scripts/fetch-artifacts.sh`), and the simulated CAPI controllers (`capi-sim`) running against one.

- `control_plane(line)`: a control plane for a test module (or test), fresh
  or given back by an earlier module of this process and wiped to a fresh
  one's state (`ControlPlane.stop()` gives it back; `destroy()` and the
  process's exit stop it). With MC_K8S_REUSE=0, always a fresh one, and one
  spare per line kept warm in the background.
- `Kube`: the apiserver as the tests read and write it (admin client
  certificate), and `ControlPlane.restart_apiserver()`: the real way to cut
  every watch and make resumed ones answer 410 Gone.
- `Sim`: capi-sim (controllers, CAPI's webhooks, the fault-injecting proxy
  the conductor talks through) on a control plane; Kubernetes paths go to
  the real apiserver, `/_sim/...` to capi-sim's control endpoint.
"""
import atexit
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import helm_charts
from conftest import BIN_DIR
from suite_timing import count

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8S_UP = os.path.join(ROOT, "scripts", "k8s-up.sh")
K8S_DOWN = os.path.join(ROOT, "scripts", "k8s-down.sh")


def artifacts():
    """`K8S_BIN_DIR` and `CAPI_CRDS_DIR` (scripts/fetch-artifacts.sh: the
    verified binaries and CRDs), resolved once per process and exported, so
    that every control plane and capi-sim started from here use them."""
    if not (os.environ.get("K8S_BIN_DIR") and os.environ.get("CAPI_CRDS_DIR")):
        p = subprocess.run([os.path.join(ROOT, "scripts", "fetch-artifacts.sh")], capture_output=True,
                           text=True, timeout=1800, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise RuntimeError(f"scripts/fetch-artifacts.sh failed: {p.stderr[-2000:]}")
        line = p.stdout.strip().splitlines()[-1]
        assert line.startswith("export "), line
        for kv in line[len("export "):].split():
            k, v = kv.split("=", 1)
            os.environ[k] = v
    return os.environ["K8S_BIN_DIR"], os.environ["CAPI_CRDS_DIR"]


_WORK = tempfile.mkdtemp(prefix="mc-k8s-")
_all = []


class ControlPlane:
    def __init__(self, line):
        count("control planes")
        self.line = line
        self.dir = tempfile.mkdtemp(prefix=f"{line}-", dir=_WORK)
        _all.append(self)
        artifacts()
        # k8s-up.sh picks free ports by binding and releasing them; another
        # test process may take one before etcd or kube-apiserver binds it
        # (seen in CI: "kube-apiserver or etcd exited"). Such a start is
        # torn down and made once more on fresh ports, with its logs kept.
        for attempt in (1, 2):
            p = subprocess.run([K8S_UP, self.dir, "--crds", line],
                               capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
            if p.returncode == 0:
                break
            exited = "exited" in p.stderr
            if attempt == 2 or not exited:
                raise RuntimeError(f"k8s-up.sh {line} failed: {p.stdout[-2000:]}{p.stderr[-2000:]}")
            subprocess.run([K8S_DOWN, self.dir], capture_output=True, timeout=60)
            failed = self.dir + "-failed"
            shutil.rmtree(failed, ignore_errors=True)
            os.rename(self.dir, failed)
            os.makedirs(self.dir)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")
        self.kube = Kube(self)
        self._kinds = None
        # What a fresh control plane holds outside the tests' namespaces:
        # a module that leaves anything else behind there, or removes any
        # of it, gets no reuse of this control plane (see `wipe`).
        self.baseline = self._outside_namespaces()

    # ---- reuse between modules of one test process (issue 48) ----
    #
    # Starting a control plane costs ~18 CPU seconds (kube-apiserver, etcd,
    # the line's CRDs), and the suite used to start one per module. A module
    # that is done gives it back (`stop`): everything it made is deleted
    # (every namespace but the system ones, after the finalizers that no
    # controller will ever remove now are cleared; every object outside them
    # that a fresh control plane does not hold), and the next module on the
    # same line in this process gets it, checked clean (`unclean`). Anything
    # a wipe cannot bring back to a fresh one's state (an apiserver left
    # stopped, a CRD deleted, a namespace that will not go) stops it instead.

    def kinds(self):
        """[(path prefix, plural, namespaced)] of every resource that can be
        listed and deleted (discovery; the CRDs are the line's, fixed)."""
        if self._kinds is None:
            versions = [("/api/v1", self.kube.get("/api/v1"))]
            for g in self.kube.get("/apis")["groups"]:
                for v in g["versions"]:
                    versions.append((f"/apis/{v['groupVersion']}", None))
            kinds = []
            for prefix, doc in versions:
                doc = doc or self.kube.get(prefix) or {"resources": []}
                for r in doc["resources"]:
                    if "/" in r["name"] or not {"list", "delete"} <= set(r.get("verbs", [])):
                        continue
                    if r["name"] in ("componentstatuses", "events", "bindings"):
                        continue
                    kinds.append((prefix, r["name"], r["namespaced"]))
            self._kinds = kinds
        return self._kinds

    def _objects(self):
        """Every object of every kind: {path: (namespace, finalizers)}."""
        out = {}
        for prefix, plural, namespaced in self.kinds():
            got = self.kube.get(f"{prefix}/{plural}") or {"items": []}
            for o in got["items"]:
                m = o["metadata"]
                ns = m.get("namespace")
                path = f"{prefix}/namespaces/{ns}/{plural}/{m['name']}" if namespaced else \
                    f"{prefix}/{plural}/{m['name']}"
                out[path] = (ns, m.get("finalizers") or [])
        return out

    @staticmethod
    def _outside(path, ns):
        """Whether an object is one of a fresh control plane's kind: not in
        a tests' namespace, nor one the control plane makes and remakes by
        itself (in every namespace its ServiceAccount and root CA; the
        apiservers' identity Leases; the APIServices of the CRDs' groups;
        the flow-control objects it keeps)."""
        plural, name = path.rsplit("/", 2)[1:]
        if ns is not None:
            return ns in SYSTEM_NAMESPACES and not (
                (plural, name) in (("serviceaccounts", "default"), ("configmaps", "kube-root-ca.crt"))
                or (plural == "leases" and ns == "kube-system"))
        if path.startswith("/api/v1/namespaces/"):
            return name in SYSTEM_NAMESPACES
        return plural not in ("apiservices", "flowschemas", "prioritylevelconfigurations")

    def _outside_namespaces(self, objects=None):
        objects = self._objects() if objects is None else objects
        return {p for p, (ns, _) in objects.items() if self._outside(p, ns)}

    def unclean(self):
        """None when the control plane holds nothing a fresh one does not;
        else what it holds (the namespaces, then other objects)."""
        if not self.ready():
            return "its kube-apiserver does not answer"
        names = {n["metadata"]["name"] for n in self.kube.get("/api/v1/namespaces")["items"]}
        if names - SYSTEM_NAMESPACES:
            return f"namespaces {sorted(names - SYSTEM_NAMESPACES)}"
        now = self._outside_namespaces()
        if now != self.baseline:
            return (f"objects not in a fresh control plane: {sorted(now - self.baseline)[:10]}; "
                    f"missing: {sorted(self.baseline - now)[:10]}")
        return None

    def wipe(self, timeout=90):
        """Delete what the tests made; True when it is then as fresh."""
        if not self.ready():
            return False
        objects = self._objects()
        if self.baseline - self._outside_namespaces(objects):
            return False  # something of a fresh control plane is gone (a CRD?)
        for path, (ns, finalizers) in objects.items():
            ours = ns is not None and ns not in SYSTEM_NAMESPACES
            extra = self._outside(path, ns) and path not in self.baseline
            if not (ours or extra):
                continue
            if finalizers:
                self._unless_gone("PATCH", path, {"metadata": {"finalizers": None}}, "application/merge-patch+json")
            if extra:
                self._delete(path)
        for n in self.kube.get("/api/v1/namespaces")["items"]:
            if n["metadata"]["name"] not in SYSTEM_NAMESPACES:
                self._delete(f"/api/v1/namespaces/{n['metadata']['name']}")
        deadline = time.time() + timeout
        while (problem := self.unclean()) is not None:
            if time.time() > deadline:
                return False
            if problem.startswith("objects"):
                # Something outside the namespaces came back (a process
                # still writing): not reusable.
                return False
            time.sleep(0.5)
        return True

    def _delete(self, path):
        self._unless_gone("DELETE", path)

    def _unless_gone(self, method, path, body=None, content_type="application/json"):
        """The request, where an object already gone (404) is no error."""
        try:
            self.kube.request(method, path, body, content_type)
        except AssertionError as e:
            if ": 404 " not in str(e):
                raise

    def env(self):
        with open(os.path.join(self.dir, "env")) as f:
            return dict(ln.strip().split("=", 1) for ln in f if "=" in ln)

    @property
    def server(self):
        return f"https://127.0.0.1:{self.env()['APISERVER_PORT']}"

    def ssl_context(self):
        pki = os.path.join(self.dir, "pki")
        ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        return ctx

    def ready(self):
        try:
            with urllib.request.urlopen(self.server + "/readyz", timeout=2, context=self.ssl_context()) as r:
                return r.status == 200
        except Exception:
            return False

    def kubectl(self, *args, check=True):
        p = subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                           timeout=180)
        if check:
            assert p.returncode == 0, f"kubectl {' '.join(args)}: {p.stderr[-2000:]}"
        return p.stdout

    def stop_apiserver(self):
        """Stop kube-apiserver (etcd and the controller manager stay);
        returns its command line for `start_apiserver`."""
        pid = int(self.env()["APISERVER_PID"])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode() for a in f.read().split(b"\0") if a]
        # Still this control plane's apiserver (its PID not another
        # process's since: scripts/k8s-down.sh).
        assert any(self.dir in a for a in argv), f"PID {pid} is not {self.dir}'s apiserver: {argv[:3]}"
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
            time.sleep(0.05)
        if os.path.exists(f"/proc/{pid}"):
            os.kill(pid, signal.SIGKILL)
        return argv

    def start_apiserver(self, argv, timeout=60):
        log = open(os.path.join(self.dir, "kube-apiserver.log"), "a")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        path = os.path.join(self.dir, "env")
        with open(path) as f:
            lines = [f"APISERVER_PID={p.pid}\n" if ln.startswith("APISERVER_PID=") else ln for ln in f]
        with open(path, "w") as f:
            f.writelines(lines)
        deadline = time.time() + timeout
        while not self.ready():
            assert time.time() < deadline, f"kube-apiserver did not come back; see {self.dir}"
            time.sleep(0.2)

    def restart_apiserver(self):
        """Every watch ends; the new apiserver's watch cache starts at the
        current revision, so a watch resumed from an older one gets 410 Gone."""
        self.start_apiserver(self.stop_apiserver())

    def stop(self):
        """Done with it: wiped and kept for this process's next module on
        the line (MC_K8S_REUSE=0: never), else stopped."""
        if not _pool.give_back(self):
            self.destroy()

    # ---- parked while kept ----
    #
    # An idle kube-apiserver holding a line's CRDs still uses ~2.8 CPU
    # seconds a minute (its watch caches' timers, measured: idle 90 s after
    # scripts/k8s-up.sh --crds v1beta2, 4.3 CPU s), and each test process
    # keeps one control plane per line between modules, often for many
    # minutes. A kept control plane is stopped (SIGSTOP: etcd, kube-apiserver
    # and the controller manager, every one still this control plane's own)
    # until a module takes it: no CPU at all while parked; on SIGCONT its
    # timers fire late, as after a long pause of the machine, and `take`
    # checks it ready and clean before handing it out.

    _PARTS = ("ETCD_PID", "APISERVER_PID", "KCM_PID")  # the order they resume in

    def _own_pids(self):
        env, pids = self.env(), []
        for key in self._PARTS:
            try:
                pid = int(env.get(key, ""))
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if self.dir.encode() in f.read():
                        pids.append(pid)
            except (OSError, ValueError):
                pass
        return pids

    def park(self):
        pids = list(reversed(self._own_pids()))
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        # Parked once each process has taken the signal (all its threads
        # stopped: /proc says T), which on a loaded machine is not at once.
        deadline = time.time() + 30
        for pid in pids:
            while _proc_state(pid) not in ("T", None) and time.time() < deadline:
                time.sleep(0.02)
        self.parked = True

    def resume(self, timeout=60):
        """Running again (when parked) and answering."""
        if not getattr(self, "parked", False):
            return
        for pid in self._own_pids():
            os.kill(pid, signal.SIGCONT)
        self.parked = False
        deadline = time.time() + timeout
        while not self.ready():
            if time.time() > deadline:
                raise AssertionError(f"a parked control plane did not answer {timeout} s after SIGCONT; see {self.dir}")
            time.sleep(0.1)

    def destroy(self):
        if getattr(self, "parked", False):
            # A stopped process acts on SIGTERM only once continued.
            for pid in self._own_pids():
                os.kill(pid, signal.SIGCONT)
            self.parked = False
        if self in _all:
            _all.remove(self)
        subprocess.run([K8S_DOWN, self.dir], capture_output=True, timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def _proc_state(pid):
    """A process's state letter (/proc/PID/stat), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


SYSTEM_NAMESPACES = {"default", "kube-system", "kube-public", "kube-node-lease"}
REUSE = os.environ.get("MC_K8S_REUSE", "1") == "1"


class _Pool:
    """Control planes given back by the modules that are done with them,
    wiped (one per line; `ControlPlane.wipe`); without reuse, one spare per
    line started in the background."""

    def __init__(self):
        self.lock = threading.Lock()
        self.spares = {}
        self.kept = {}

    def give_back(self, cp):
        """Keeps `cp` for the next module on its line, wiped in the
        background (the module's teardown does not wait for it); False when
        it is not kept (no reuse, or one is kept for the line already)."""
        if not REUSE:
            return False
        with self.lock:
            if cp.line in self.kept:
                return False
            box = {}

            def run():
                try:
                    box["clean"] = cp.wipe()
                    if box["clean"]:
                        cp.park()
                except Exception as e:
                    box["clean"], box["error"] = False, e
                if not box["clean"]:
                    cp.destroy()
            t = threading.Thread(target=run, daemon=True)
            self.kept[cp.line] = (t, box, cp)
            t.start()
        return True

    def _start(self, line):
        box = {}

        def run():
            try:
                box["cp"] = ControlPlane(line)
            except Exception as e:  # handed to whoever takes it
                box["error"] = e
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, box

    def take(self, line):
        with self.lock:
            kept = self.kept.pop(line, None)
        if kept is not None:
            t, box, kept = kept
            t.join()
        if kept is not None and box["clean"]:
            try:
                kept.resume()
            except AssertionError as e:
                # Not this module's doing: said, and a fresh one started.
                print(f"[k8s] {e}: starting a fresh control plane", file=sys.stderr)
                kept.destroy()
                kept = None
        if kept is not None and box["clean"]:
            problem = kept.unclean()
            if problem is None:
                count("control planes reused")
                return kept
            kept.destroy()
            # It was clean when the last module gave it back: something of
            # that module's is still writing to it.
            raise AssertionError(f"a control plane given back clean holds {problem}: a process of an earlier "
                                 f"module still writes to it (a conductor, capi-sim or proxy left running)")
        with self.lock:
            spare = self.spares.pop(line, None)
            if spare is None:
                spare = self._start(line)
            t, box = spare
        t.join()
        with self.lock:
            # Reused control planes make a spare one mostly idle (~5% of a
            # core while it waits) and the last one of each line wasted.
            if not REUSE and os.environ.get("MC_K8S_PREWARM", "1") == "1":
                self.spares[line] = self._start(line)
        if "error" in box:
            raise box["error"]
        return box["cp"]

    def stop(self):
        with self.lock:
            spares, self.spares = list(self.spares.values()), {}
            kept, self.kept = list(self.kept.values()), {}
        for t, box in spares:
            t.join()
            if "cp" in box:
                box["cp"].destroy()
        for t, box, cp in kept:
            t.join()
            cp.destroy()


_pool = _Pool()


def control_plane(line):
    """A ready control plane with `line`'s CRDs, fresh or wiped to a fresh
    one's state (the caller stops it)."""
    return _pool.take(line)


@atexit.register
def _stop_all():
    _pool.stop()
    for cp in list(_all):
        cp.destroy()
    shutil.rmtree(_WORK, ignore_errors=True)


class Kube:
    """The real apiserver, as an administrator (the tests' own reads and
    writes, never through the conductor's proxy)."""

    def __init__(self, cp):
        self.cp = cp

    def request(self, method, path, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.cp.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "User-Agent": "mc-tests/1"})
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.cp.ssl_context()) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404 and method == "GET":
                return None
            raise AssertionError(f"{method} {path}: {e.code} {e.read()[:2000]!r}") from None

    def get(self, path):
        return self.request("GET", path)

    def items(self, api, plural, selector="", ns=None):
        base = "/api/v1" if api == "v1" else f"/apis/{api}"
        q = f"?labelSelector={urllib.parse.quote(selector)}" if selector else ""
        where = f"/namespaces/{ns}" if ns else ""
        got = self.get(f"{base}{where}/{plural}{q}")
        return got["items"] if got else []

    def patch(self, api, plural, name, body, ns, subresource=""):
        base = "/api/v1" if api == "v1" else f"/apis/{api}"
        return self.request("PATCH", f"{base}/namespaces/{ns}/{plural}/{name}{subresource}", body,
                            "application/merge-patch+json")

    def create_namespace(self, name, annotations):
        return self.request("POST", "/api/v1/namespaces",
                            {"apiVersion": "v1", "kind": "Namespace",
                             "metadata": {"name": name, "annotations": annotations}})


SIM_BIN = os.environ.get("CAPI_SIM_BIN", os.path.join(BIN_DIR, "capi-sim"))


class Sim:
    """capi-sim against a real control plane (its own, unless `cp` is
    given): `kubeconfig` is the fault-injecting proxy's (what conductors
    use), `cp.kubeconfig` the apiserver's own."""

    def __init__(self, tmp, line, tick_ms=20, cp=None, namespace=None, workload_apiservers=False, openstack=False,
                 workload_netns=False):
        self.own_cp = cp is None
        self.cp = cp or control_plane(line)
        self.kube = self.cp.kube
        self.namespace = namespace
        self.kubeconfig = str(tmp / f"sim-{line}.kubeconfig")
        ready = tmp / f"sim-{line}.url"
        if ready.exists():
            ready.unlink()
        self.log = open(tmp / f"sim-{line}.log", "w")
        self.proc = subprocess.Popen([SIM_BIN, "--kubeconfig", self.cp.kubeconfig, "--line", line,
                                      "--tick-ms", str(tick_ms), "--proxy-kubeconfig", self.kubeconfig,
                                      "--ready-file", str(ready),
                                      *(["--workload-apiservers", *helm_charts.engine_args()] if workload_apiservers else []),
                                      *(["--workload-netns"] if workload_netns else []),
                                      *(["--openstack"] if openstack else [])],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while not ready.exists() or ready.stat().st_size == 0:
            assert self.proc.poll() is None, f"capi-sim exited; see {self.log.name}"
            assert time.time() < deadline, "capi-sim did not start"
            time.sleep(0.1)
        self.control = ready.read_text().strip()
        with open(self.kubeconfig) as f:
            self.server = next(ln.split("server:")[1].strip() for ln in f if "server:" in ln)
        self.capi = "cluster.x-k8s.io/" + line

    def _control(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.control + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1800) as r:
            return json.loads(r.read())

    def get(self, path):
        if path.startswith("/_sim/"):
            return self._control("GET", path)
        return self.kube.get(path)

    def post(self, path, body=None):
        if path.startswith("/_sim/"):
            return self._control("POST", path, body or {})
        return self.kube.request("POST", path, body or {})

    def delete(self, path):
        return self._control("DELETE", path)

    def items(self, api, plural, selector="", ns=None):
        return self.kube.items(api, plural, selector, ns or self.namespace)

    def patch(self, api, plural, name, body, ns=None):
        return self.kube.patch(api, plural, name, body, ns or self.namespace)

    def patch_status(self, api, plural, name, body, ns=None):
        return self.kube.patch(api, plural, name, body, ns or self.namespace, "/status")

    def flip_ready(self, stack_id, ns=None):
        """Set a CAPI Cluster's Ready (v1beta2: Available) condition False,
        as CAPI does when the cluster degrades; returns the conditions
        before, to put back with `set_conditions`. Pause the controllers
        first, or the simulated one sets it back at its next pass."""
        ns = ns or self.namespace
        path = f"/apis/{self.capi}/namespaces/{ns}/clusters/{stack_id}"
        conditions = self.get(path)["status"]["conditions"]
        ready = "Available" if self.capi.endswith("v1beta2") else "Ready"
        flipped = [dict(c, status="False", reason="Test", message="down",
                        **({} if self.capi.endswith("v1beta2") else {"severity": "Warning"}))
                   if c["type"] == ready else c for c in conditions]
        self.set_conditions(stack_id, flipped, ns)
        return conditions

    def set_conditions(self, stack_id, conditions, ns=None):
        self.patch_status(self.capi, "clusters", stack_id, {"status": {"conditions": conditions}}, ns)

    def create_namespace(self, name, annotations):
        return self.kube.create_namespace(name, annotations)

    def controller_errors(self):
        return self.get("/_sim/controller-errors")

    def describe(self, cluster, ns=None):
        """For a failure's message: one line per CAPI object of `cluster`
        (a Cluster's name) as the apiserver holds it (phase, deletion,
        finalizers, owners), then the simulated controllers' last refused
        writes. Never raises: it is written when something already failed."""
        lines = []
        for api, plural in ((self.capi, "clusters"), ("controlplane.cluster.x-k8s.io/" + self.capi.split("/")[1],
                                                     "kubeadmcontrolplanes"),
                            (self.capi, "machinedeployments"), (self.capi, "machinesets"), (self.capi, "machines"),
                            ("infrastructure.cluster.x-k8s.io/v1beta1", "openstackmachines")):
            try:
                sel = "" if plural == "clusters" else f"cluster.x-k8s.io/cluster-name={cluster}"
                got = self.items(api, plural, sel, ns)
            except Exception as e:  # noqa: BLE001 (a diagnostic)
                lines.append(f"  {plural}: not listed ({e})")
                continue
            for o in got:
                m = o["metadata"]
                if plural == "clusters" and m["name"] != cluster:
                    continue
                lines.append(f"  {o['kind']} {m['name']}: phase={o.get('status', {}).get('phase')} "
                             f"deleting={'deletionTimestamp' in m} finalizers={m.get('finalizers', [])} "
                             f"owners={[r['kind'] + '/' + r['name'] for r in m.get('ownerReferences', [])]}")
        try:
            errors = self.controller_errors()[-10:]
        except Exception as e:  # noqa: BLE001
            errors = [f"not read ({e})"]
        return "\n".join([f"CAPI objects of {cluster}:", *lines, "capi-sim's last refused writes:",
                          *(f"  {e}" for e in errors)])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        if self.own_cp:
            self.cp.stop()
