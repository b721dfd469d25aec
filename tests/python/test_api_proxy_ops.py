"""magnum-capi-proxy under operations (issue 51), on real network
namespaces and a real kube-apiserver with CAPO's CRDs, no conductor: the
test writes what the conductor and CAPO would (the proxy Service, the
OpenStackCluster and its status, control-plane OpenStackMachines) and
plays the tenant network: a namespace `qdhcp-<network id>` (as the DHCP
agent names it) with the cluster's API address on its loopback and a TCP
listener there (the API: the proxy's probe is a TCP connect).

- SIGTERM (systemd's stop) and SIGINT: the proxy host withdraws its
  EndpointSlices and deletes its Lease before the process ends, with no
  other proxy host to clean up after it.
- Probes run on `--probe-interval` per cluster, not on every watch event: a
  burst of 100 unrelated OpenStackCluster events during a 2-second outage
  withdraws nothing; a 12-second outage withdraws within the stated bound.
- Two proxy fleets with different `--lease-namespace` keep each other's
  slices.
- A cluster without a load balancer whose first five control-plane
  addresses never answer (their packets dropped, so each dial runs into its
  timeout) and whose sixth does: published within one dial timeout and a
  probe interval, not five timeouts.
- Every proxy runs under the shipped identity
  (deploy/kubernetes/magnum-capi-proxy-rbac.yaml, issue 53), the apiserver
  auditing it: nothing refused, every rule used (the last test).

Host addresses 198.18.4.1 and 198.18.5.1 (test_api_proxy.py uses .0 and .1:
both may run at once in two test processes).
"""
import os
import signal
import subprocess
import threading
import time
import uuid

import pytest

import k8s
import rbac
from conftest import free_port
from test_api_proxy import PROXY_BIN, SLICES, HostAddress, ip, until

LINE = "v1beta1"  # CAPO's v1beta1 kinds: both lines' CAPO serve them
CAPO = "infrastructure.cluster.x-k8s.io/v1beta1"
HOST_LABEL = "magnum.openstack.org/api-proxy-host"
VIP = "10.0.0.10"
# The proxies run under the shipped identity (issue 53).
PROXY = rbac.Identity("magnum-capi-proxy")
OTHER_FLEET = "mcp-ops-other-fleet"
# What a loaded 2-core machine may add to a bound (scheduling, the watch's
# delivery, this test's polling).
SLACK = 5


class TenantNet:
    """A tenant network's namespace on this host, `qdhcp-<id>`, holding
    `addrs` on its loopback; `serve(addr)` runs the API's listener there.
    `drop` (a CIDR) is routed to where every packet is dropped: a dial
    there gets no answer and runs into its timeout."""

    def __init__(self, addrs=(VIP,), drop=None):
        self.id = str(uuid.uuid4())
        self.ns = f"qdhcp-{self.id}"
        ip("netns", "add", self.ns)
        ip("-n", self.ns, "link", "set", "lo", "up")
        for a in addrs:
            ip("-n", self.ns, "addr", "add", f"{a}/32", "dev", "lo")
        self.sink = None
        if drop:
            # Routed over a veth to a namespace with no address at all,
            # through a gateway whose link-layer address is fixed (no ARP
            # to fail fast): the peer takes every packet and answers none.
            self.sink = f"mcp-sink-{self.id[:8]}"
            ip("netns", "add", self.sink)
            ip("link", "add", "drop0", "netns", self.ns, "type", "veth", "peer", "name", "drop1", "netns", self.sink)
            ip("-n", self.sink, "link", "set", "drop1", "up")
            ip("-n", self.ns, "link", "set", "drop0", "up")
            ip("-n", self.ns, "addr", "add", "10.255.0.2/24", "dev", "drop0")
            ip("-n", self.ns, "neigh", "add", "10.255.0.1", "lladdr", "02:00:00:00:00:01", "dev", "drop0",
               "nud", "permanent")
            ip("-n", self.ns, "route", "add", drop, "via", "10.255.0.1", "dev", "drop0")
        self.listeners = {}

    def serve(self, addr=VIP, port=6443):
        code = ("import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                f"s.bind(({addr!r}, {port}))\ns.listen(64)\nprint('ready', flush=True)\n"
                "while True:\n    c, _ = s.accept()\n    c.close()\n")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns, "python3", "-c", code], stdout=subprocess.PIPE,
                             text=True)
        assert p.stdout.readline().strip() == "ready", "the API's listener did not start"
        self.listeners[addr] = p

    def stop(self, addr=VIP):
        """The API stops answering: its listener gone, a dial refused."""
        p = self.listeners.pop(addr)
        p.kill()
        p.wait(10)

    def remove(self):
        for a in list(self.listeners):
            self.stop(a)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        if self.sink:
            subprocess.run(["ip", "netns", "del", self.sink], capture_output=True)


class Proxy:
    """One proxy host's process."""

    def __init__(self, tmp, kubeconfig, host, addr, lease_namespace="magnum-system", probe=1, dial=1, failures=2,
                 lease=6):
        self.host, self.addr, self.port, self.metrics_port = host, addr, free_port(), free_port()
        self.probe, self.dial, self.failures = probe, dial, failures
        self.log_path = tmp / f"proxy-{host}-{lease_namespace}.log"
        self.log = open(self.log_path, "a")
        self.args = [PROXY_BIN, "--host", host, "--advertise-address", f"{addr}:{self.port}",
                     "--kubeconfig", kubeconfig, "--lease-namespace", lease_namespace,
                     "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--probe-interval", str(probe),
                     "--dial-timeout", str(dial), "--failures", str(failures), "--lease-duration", str(lease)]
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        until(f"proxy {host} healthy", self.healthy, 60)

    @property
    def bound(self):
        """The documented withdrawal bound (Settings::withdraw_bound)."""
        return self.probe * (self.failures + 1) + self.dial

    def healthy(self):
        assert self.proc.poll() is None, f"magnum-capi-proxy exited; see {self.log_path}"
        try:
            return self.metrics() is not None and self._get("/healthz").startswith("ok")
        except OSError:
            return False

    def _get(self, path):
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as r:
            return r.read().decode()

    def metrics(self):
        out = {}
        for line in self._get("/metrics").splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def metric(self, name):
        return self.metrics().get(name, 0.0)

    def text(self):
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("this test makes network namespaces: run it as root (CI does)")
    tmp = tmp_path_factory.mktemp("proxy-ops")
    cp = k8s.control_plane(LINE)
    plain = rbac.audit(cp, tmp, [PROXY.user])
    hosts = [HostAddress(4), HostAddress(5)]
    # The shipped identity, and its Leases' Role in the other fleet's
    # namespace too (what its operator adds: the file's header says so).
    for ns in ("magnum-system", OTHER_FLEET):
        cp.kube.create_namespace(ns, {})
    docs = PROXY.docs()
    docs += [dict(d, metadata=dict(d["metadata"], namespace=OTHER_FLEET))
             for d in docs if d["kind"] in ("Role", "RoleBinding")]
    PROXY.apply(cp, tmp, [d for d in docs if d["kind"] != "Namespace"])
    w = dict(cp=cp, kube=cp.kube, hosts=hosts, tmp=tmp, nets=[], proxies=[], kubeconfig=PROXY.kubeconfig(cp, tmp))
    yield w
    for p in w["proxies"]:
        p.stop(signal.SIGKILL)
    for n in w["nets"]:
        n.remove()
    for h in hosts:
        h.remove()
    rbac.unaudit(cp, plain)
    cp.stop()


@pytest.fixture(autouse=True)
def proxies_stopped(world):
    """A test that fails leaves no proxy running into the next one (its
    log file and its slices would be the next test's)."""
    yield
    while world["proxies"]:
        world["proxies"].pop().stop(signal.SIGKILL)


def proxy(world, i, **kw):
    h = world["hosts"][i]
    p = Proxy(world["tmp"], world["kubeconfig"], f"ops-host-{i}", h.addr, **kw)
    world["proxies"].append(p)
    return p


def net(world, **kw):
    n = TenantNet(**kw)
    world["nets"].append(n)
    return n


def cluster(world, name, network, vip=VIP, machines=()):
    """What the conductor and CAPO write for a cluster without an API
    floating IP: its namespace, the proxy Service, the OpenStackCluster
    (network, load balancer VIP when `vip`) and control-plane
    OpenStackMachines with the given InternalIPs, in name order."""
    kube, ns = world["kube"], f"magnum-ops-{name}"
    kube.create_namespace(ns, {})
    kube.request("POST", f"/api/v1/namespaces/{ns}/services", {
        "metadata": {"name": f"{name}-apiserver", "labels": {"magnum.openstack.org/api-proxy": name}},
        "spec": {"ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}})
    base = f"/apis/{CAPO}/namespaces/{ns}"
    kube.request("POST", f"{base}/openstackclusters", {
        "apiVersion": CAPO, "kind": "OpenStackCluster",
        "metadata": {"name": name, "labels": {"cluster.x-k8s.io/cluster-name": name}},
        "spec": {"identityRef": {"cloudName": "openstack", "name": f"{name}-cloud-config"}}})
    status = {"ready": True, "network": {"id": network.id, "name": f"k8s-{name}"}}
    if vip:
        status["apiServerLoadBalancer"] = {"id": str(uuid.uuid4()), "name": f"k8s-{name}", "ip": "",
                                           "internalIP": vip}
    kube.request("PATCH", f"{base}/openstackclusters/{name}/status", {"status": status},
                 "application/merge-patch+json")
    for i, addr in enumerate(machines):
        m = f"{name}-control-plane-{i}"
        kube.request("POST", f"{base}/openstackmachines", {
            "apiVersion": CAPO, "kind": "OpenStackMachine",
            "metadata": {"name": m, "labels": {"cluster.x-k8s.io/cluster-name": name,
                                               "cluster.x-k8s.io/control-plane": ""}},
            "spec": {"image": {"filter": {"name": "ubuntu"}}, "flavor": "m1.small"}})
        kube.request("PATCH", f"{base}/openstackmachines/{m}/status",
                     {"status": {"addresses": [{"type": "InternalIP", "address": addr}]}},
                     "application/merge-patch+json")
    return ns


def host_slices(world, ns, host=None):
    """The proxy slices in `ns` (of `host` only, if given): {name: slice}."""
    sel = f"{HOST_LABEL}={host}" if host else HOST_LABEL
    return {s["metadata"]["name"]: s for s in world["kube"].items(SLICES, "endpointslices", sel, ns=ns)}


def lease(world, host, namespace="magnum-system"):
    return world["kube"].get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/magnum-capi-proxy-{host}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_proxy_withdraws_its_slices_before_it_ends(world, sig):
    """One proxy host (nobody else would ever delete its slices): stopped as
    systemd stops it (SIGTERM) or by a person (SIGINT), it deletes every
    slice it published and its Lease, then exits 0 within its stop bound."""
    n = net(world)
    n.serve()
    name = f"stop-{sig.name.lower()}"
    ns = cluster(world, name, n)
    p = proxy(world, 0)
    until("the slice published", lambda: host_slices(world, ns, p.host), 30)
    assert lease(world, p.host) is not None
    t0 = time.time()
    rc = p.stop(sig)
    took = time.time() - t0
    world["proxies"].remove(p)
    # Gone, and nothing else ran that could have removed them: the process
    # did before it ended.
    assert rc == 0, p.text()[-2000:]
    assert took < 10 + SLACK, took  # controller::STOP_BOUND
    print(f"{sig.name}: exited {took:.2f} s after the signal, its slice and Lease gone")
    assert host_slices(world, ns, p.host) == {}, "a stopped proxy host left its slice"
    assert lease(world, p.host) is None, "a stopped proxy host left its Lease"
    text = p.text()
    assert f"signal=\"{sig.name}\"" in text or f"signal={sig.name}" in text, text[-2000:]
    assert "withdrew this host's slices and released its Lease" in text, text[-2000:]
    assert "\x1b[" not in text, "colour codes in a log written to a file"


def test_unrelated_events_during_a_short_outage_withdraw_nothing(world):
    """The documented timing (3 s probes, 2 failures, 2 s dials: withdrawn
    within 11 s). A 2-second outage of the API while an unrelated
    OpenStackCluster is patched 100 times: at most one probe fails, nothing
    is withdrawn. Then a 12-second outage: withdrawn within the bound."""
    n, other = net(world), net(world)
    n.serve()
    ns = cluster(world, "burst", n)
    ns_other = cluster(world, "unrelated", other)  # its API never answers
    p = proxy(world, 1, probe=3, dial=2, failures=2)
    [slice_name] = until("the slice published", lambda: host_slices(world, ns, p.host), 30)[0]
    uid = host_slices(world, ns, p.host)[slice_name]["metadata"]["uid"]
    failures0 = p.metric("magnum_capi_proxy_probe_failures_total")
    probes0 = p.metric("magnum_capi_proxy_probes_total")
    osc = f"/apis/{CAPO}/namespaces/{ns_other}/openstackclusters/unrelated"
    done = threading.Event()

    def burst():
        for i in range(100):
            world["kube"].request("PATCH", osc, {"metadata": {"annotations": {"burst": str(i)}}},
                                  "application/merge-patch+json")
        done.set()
    n.stop()
    t0 = time.time()
    writer = threading.Thread(target=burst)
    writer.start()
    while time.time() < t0 + 2:
        time.sleep(0.05)
    n.serve()
    back = p.metric("magnum_capi_proxy_probes_total")
    writer.join(120)
    assert done.is_set(), "the burst did not finish"
    # The barrier: two more probes of each of the two clusters after the
    # API came back, so any withdrawal the outage caused has been made by
    # then.
    until("two more probe rounds", lambda: p.metric("magnum_capi_proxy_probes_total") >= back + 4, 60)
    now = host_slices(world, ns, p.host)
    assert slice_name in now and now[slice_name]["metadata"]["uid"] == uid, "the slice was withdrawn"
    assert p.metric('magnum_capi_proxy_slice_writes_total{kind="withdraw"}') == 0
    # "burst"'s own failed probes over the 2 s: at most one (one interval);
    # the unrelated cluster's fail every interval.
    # The proxy probes every cluster it can reach a namespace of: these
    # two and the earlier tests' (their networks still up), each once per
    # interval.
    failed = p.metric("magnum_capi_proxy_probe_failures_total") - failures0
    probes = p.metric("magnum_capi_proxy_probes_total") - probes0
    probed = sum(p.metric(f'magnum_capi_proxy_clusters{{state="{st}"}}') for st in ("up", "down"))
    assert probed >= 2, probed
    assert failed <= probes / probed + 1, (failed, probes, probed)
    assert probes <= probed * ((time.time() - t0) / 3 + 2), f"{probes} probes of {probed} clusters: not on the interval"

    # A 12-second outage: withdrawn within the bound.
    n.stop()
    t1 = time.time()
    _, took = until("the slice withdrawn", lambda: not host_slices(world, ns, p.host), p.bound + SLACK + 5)
    assert took <= p.bound + SLACK, (took, p.bound)
    print(f"2 s outage and 100 events: {failed:.0f} of {probes:.0f} probes failed (the unrelated cluster's "
          f"included), nothing withdrawn; 12 s outage: withdrawn after {took:.1f} s (bound {p.bound} s)")
    while time.time() < t1 + 12:
        time.sleep(0.1)
    n.serve()
    until("the slice published again", lambda: host_slices(world, ns, p.host), p.probe + p.dial + SLACK)
    assert p.stop() == 0
    world["proxies"].remove(p)


def test_two_lease_namespaces_keep_each_others_slices(world):
    """Two proxy fleets (a proxy each) with different lease namespaces,
    both reaching one cluster: each publishes its slice and neither deletes
    the other's (it cannot see the other's Lease)."""
    n = net(world)
    n.serve()
    ns = cluster(world, "fleets", n)
    a = proxy(world, 0, lease_namespace="magnum-system")
    b = proxy(world, 1, lease_namespace=OTHER_FLEET)
    until("both slices", lambda: {a.host, b.host} <= {
        s["metadata"]["labels"][HOST_LABEL] for s in host_slices(world, ns).values()}, 30)
    # The barrier: each proxy has made three more passes (each pass
    # collects stale slices) past its Lease's expiry bound in the other's
    # namespace (6 s lease + 5 s grace: a host without a Lease is stale at
    # once).
    pa = a.metric("magnum_capi_proxy_pass_seconds_count")
    pb = b.metric("magnum_capi_proxy_pass_seconds_count")
    until("three more passes of each", lambda: a.metric("magnum_capi_proxy_pass_seconds_count") >= pa + 3
          and b.metric("magnum_capi_proxy_pass_seconds_count") >= pb + 3, 60)
    hosts = {s["metadata"]["labels"][HOST_LABEL] for s in host_slices(world, ns).values()}
    assert hosts == {a.host, b.host}, hosts
    for p in (a, b):
        assert p.metric('magnum_capi_proxy_slice_writes_total{kind="stale"}') == 0, p.text()[-2000:]
    labels = {s["metadata"]["labels"][HOST_LABEL]: s["metadata"]["labels"].get(
        "magnum.openstack.org/api-proxy-lease-namespace") for s in host_slices(world, ns).values()}
    assert labels == {a.host: "magnum-system", b.host: OTHER_FLEET}, labels
    for p in (a, b):
        assert p.stop() == 0
        world["proxies"].remove(p)
    assert host_slices(world, ns) == {}


def test_unreachable_control_plane_addresses_cost_one_dial_timeout(world):
    """No load balancer: six control-plane machines, the first five (in
    name order) at addresses whose packets are dropped, the sixth
    answering. With 3 s dials one after another it would take 15 s to reach
    the sixth; all at once, the slice is published within one dial timeout
    and a probe interval."""
    unreachable = [f"10.0.1.{i}" for i in range(1, 6)]
    n = net(world, addrs=("10.0.0.20",), drop="10.0.1.0/24")
    n.serve("10.0.0.20")
    ns = cluster(world, "no-lb", n, vip=None, machines=[*unreachable, "10.0.0.20"])
    t0 = time.time()
    p = proxy(world, 0, probe=1, dial=3, failures=2)
    _, took = until("the slice published", lambda: host_slices(world, ns, p.host), 60)
    took = time.time() - t0
    assert took <= p.dial + p.probe + SLACK, f"published after {took:.1f} s"
    print(f"5 of 6 control-plane addresses dropped, 3 s dials: published {took:.1f} s after the proxy started")
    text = p.text()
    assert "up (namespace qdhcp-" in text, text[-2000:]
    assert p.stop() == 0
    world["proxies"].remove(p)


def test_waiting_clusters_are_said_once_per_change(world):
    """A cluster whose OpenStackCluster has no network yet is logged at
    info with why, once, and again when its state changes."""
    kube = world["kube"]
    ns = "magnum-ops-waiting"
    kube.create_namespace(ns, {})
    kube.request("POST", f"/api/v1/namespaces/{ns}/services", {
        "metadata": {"name": "w-apiserver", "labels": {"magnum.openstack.org/api-proxy": "w"}},
        "spec": {"ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]}})
    p = proxy(world, 1)
    until("the wait said", lambda: "waiting: no OpenStackCluster of cluster w" in p.text(), 30)
    passes = p.metric("magnum_capi_proxy_pass_seconds_count")
    until("three more passes", lambda: p.metric("magnum_capi_proxy_pass_seconds_count") >= passes + 3, 30)
    assert p.text().count("waiting: no OpenStackCluster of cluster w") == 1, p.text()[-2000:]
    n = net(world)
    n.serve()
    base = f"/apis/{CAPO}/namespaces/{ns}"
    kube.request("POST", f"{base}/openstackclusters", {
        "apiVersion": CAPO, "kind": "OpenStackCluster", "metadata": {"name": "w"},
        "spec": {"identityRef": {"cloudName": "openstack", "name": "w-cloud-config"}}})
    until("the next wait said", lambda: "waiting: its OpenStackCluster names no network yet" in p.text(), 30)
    kube.request("PATCH", f"{base}/openstackclusters/w/status", {"status": {
        "ready": True, "network": {"id": n.id, "name": "k8s-w"},
        "apiServerLoadBalancer": {"id": "lb", "name": "k8s-w", "ip": "", "internalIP": VIP}}},
        "application/merge-patch+json")
    until("up said", lambda: f"up (namespace {n.ns})" in p.text(), 30)
    assert p.stop() == 0
    world["proxies"].remove(p)


def test_the_proxies_ran_under_the_shipped_identity_which_grants_nothing_more(world):
    """Every proxy of this module ran with a token of the shipped
    ServiceAccount (deploy/kubernetes/magnum-capi-proxy-rbac.yaml) and the
    apiserver audited it: nothing it asked was refused, and each verb the
    identity grants was used, so removing any one makes a test above fail
    with the apiserver's 403 (`MC_RBAC_DROP=magnum-capi-proxy=GROUP/RESOURCE:VERB`).
    Judged over the whole module: run it whole."""
    seen, refused = PROXY.used(world["cp"].audit_log)
    assert refused == [], f"the shipped identity refused the proxies' requests: {refused}"
    unused = sorted(rbac.granted(PROXY.docs()) - set(seen))
    assert unused == [], f"rules the proxies never used (remove them, or drive the path that does): {unused}\n" \
        f"used:\n{rbac.discovered(seen)}"
