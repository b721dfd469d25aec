"""Clusters without an API floating IP (issue 31), through the real magnum-api.

What runs: the run's real Keystone, Glance, Nova, Neutron (api_env.py), magnum-api 23.0.0
(console script) and our conductor; a real kube-apiserver as the management
cluster; capi-sim with `--workload-netns`: each workload cluster's real
kube-apiserver listens only at its API address (10.0.0.10: the two clusters'
networks overlap) inside a namespace behind `qdhcp-<network id>`, as a VM
behind a Neutron network host, and capi-sim's CAPI controllers reach it only
through the cluster's kubeconfig Secret, whose `*.svc` name they resolve to
the Service's ready EndpointSlices (what the management cluster's DNS and
kube-proxy do for CAPI's pods); a Machine gets its nodeRef only through that
path. Two `magnum-capi-proxy` processes play two network hosts, each on an
address of its own (an EndpointSlice may not point at loopback: the
apiserver refuses it): 198.18.0.1 and 198.18.1.1 (RFC 2544's test range) on
veth pairs the test makes, whose far ends sit in namespaces of its own, so
every connection stays on this machine.

The conductor and the proxies reach the management cluster with tokens of
their shipped ServiceAccounts only (deploy/kubernetes/*-rbac.yaml, issue
53). On the v1beta1 line (see `env`). The user session: a template with
`master_lb_floating_ip_enabled=false`; a
create while no proxy runs waits and says why in `status_reason`; with the
proxies both clusters reach CREATE_COMPLETE; `kubectl get nodes` through a
proxy with the kubeconfig `cluster config` writes (client certificate signed
by the conductor) reaches each cluster's own apiserver; cutting one
network's link withdraws that cluster's slices within the proxies' stated
bound, the other cluster's stay; a proxy killed and restarted serves both
again; with one proxy host dead its slices expire and a resize and an
upgrade complete through the other; deleting the clusters leaves no Service,
slice or namespace.

The template also carries the API server labels (issue 32: extra certificate
names, TLS ciphers for the API server and the kubelets, admission plugins,
OIDC): the workload kube-apiservers run with the flags the
KubeadmControlPlane holds and serve the extra name.
"""
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.request

import pytest

import rbac
from api_env import ApiEnv
from conftest import BIN_DIR, free_port

PROXY_BIN = os.path.join(BIN_DIR, "magnum-capi-proxy")
COMMON = ["--coe", "kubernetes", "--external-network", "public", "--flavor", "m1.small",
          "--master-flavor", "m1.medium", "--keypair", "mykey", "--master-lb-enabled",
          "--network-driver", "calico"]
# The proxies' timing, and the bound it gives (proxy/src/controller.rs,
# Settings::withdraw_bound: `failures` probe intervals, the last dial's
# timeout and one pass).
PROBE, DIAL, FAILURES, LEASE = 1, 1, 2, 6
WITHDRAW_BOUND = PROBE * (FAILURES + 1) + DIAL
# Another host's slices go once its Lease expired, plus the 5 s grace for
# clock skew (proxy/src/controller.rs, collect_stale), and one pass.
EXPIRY_BOUND = LEASE + 5 + PROBE
# What a loaded 2-core machine may add to either (scheduling, the watch's
# delivery, this test's own polling).
SLACK = 5
SLICES = "discovery.k8s.io/v1"
# The API server labels (issue 32), on these clusters too: capi-sim starts
# the workload kube-apiserver with the flags the KubeadmControlPlane holds,
# so it must start and serve with them.
# One `--labels` per label: magnumclient splits a single `--labels` at its
# commas, which these lists hold (`format_labels`).
API_LABELS = ["api_server_cert_sans=api.example.com",
              "api_server_tls_cipher_suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,"
              "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
              "kubelet_tls_cipher_suites=TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
              "admission_control_list=AlwaysPullImages",
              "oidc_issuer_url=https://issuer.example.com", "oidc_client_id=kubernetes", "oidc_groups_claim=groups"]


def labels(*pairs):
    return [a for p in (*pairs, *API_LABELS) for a in ("--labels", p)]


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class HostAddress:
    """An address of this machine for one proxy host: the near end of a
    veth pair whose far end is in a namespace of the test's."""

    def __init__(self, n):
        self.addr, self.ns, self.dev = f"198.18.{n}.1", f"mcp-test-host-{n}", f"mcphost{n}"
        self.remove()
        ip("netns", "add", self.ns)
        ip("link", "add", self.dev, "type", "veth", "peer", "name", f"{self.dev}p")
        ip("link", "set", f"{self.dev}p", "netns", self.ns)
        ip("-n", self.ns, "link", "set", f"{self.dev}p", "up")
        ip("addr", "add", f"{self.addr}/32", "dev", self.dev)
        ip("link", "set", self.dev, "up")

    def remove(self):
        subprocess.run(["ip", "link", "del", self.dev], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


class Proxy:
    """One network host's magnum-capi-proxy."""

    def __init__(self, env, host, addr):
        self.env, self.host, self.addr = env, host, addr
        self.port, self.metrics_port = free_port(), free_port()
        self.log = open(env.tmp / f"proxy-{host}.log", "a")
        self.args = [PROXY_BIN, "--host", host, "--listen", f"{addr}:{self.port}",
                     "--advertise-address", f"{addr}:{self.port}", "--kubeconfig", env.proxy_kubeconfig,
                     "--metrics-listen", f"127.0.0.1:{self.metrics_port}", "--probe-interval", str(PROBE),
                     "--dial-timeout", str(DIAL), "--failures", str(FAILURES), "--lease-duration", str(LEASE)]
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, f"magnum-capi-proxy exited; see {self.log.name}"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                time.sleep(0.2)
        raise AssertionError(f"magnum-capi-proxy not healthy; see {self.log.name}")

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r"^(\w+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
            if m:
                out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


# One CAPI line (issue 48: a test runs on both only where its outcome
# depends on the line). What the proxy does (Services, EndpointSlices, its
# probes and Leases, the kubeconfig's `*.svc` name) is the same on both; what
# differs by line is covered on both elsewhere: the rendering of the
# OpenStackCluster and KubeadmControlPlane (conductor/tests/render_valid.rs,
# both lines' CRDs), the Machines' status mapping, resize and upgrade
# (test_lifecycle.py, test_day2.py, both lines). v1beta1 here, because
# test_labels_all.py checks the workload apiserver's flags from the
# KubeadmControlPlane on v1beta2: the two lines' KCP shapes (extraArgs a map,
# a list) both reach a real apiserver.
@pytest.fixture(scope="module", params=["v1beta1"])
def env(request, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("this test makes network namespaces: run it as root (CI does)")
    line = request.param
    tmp = tmp_path_factory.mktemp(f"api-proxy-{line}")
    # The conductor and the proxies under their shipped identities (issue
    # 53), each with a token of its own ServiceAccount.
    e = ApiEnv(tmp, "23", "console", line, workload_netns=True, identities=True)
    proxy = rbac.Identity("magnum-capi-proxy")
    proxy.apply(e.sim.cp, tmp)
    e.proxy_kubeconfig = proxy.kubeconfig(e.sim.cp, tmp)
    e.line = line
    e.hosts = [HostAddress(0), HostAddress(1)]
    yield e
    for p in getattr(e, "proxies", []):
        p.stop()
    for h in e.hosts:
        h.remove()
    assert e.close() == 0, "the conductor did not stop cleanly"


def settled(c):
    return c is not None and not c["status"].endswith("_IN_PROGRESS")


def until(what, check, timeout):
    """Poll `check` (no sleep stands for an outcome: each wait ends on the
    state it waits for); returns (value, seconds taken)."""
    start = time.time()
    while time.time() < start + timeout:
        got = check()
        if got:
            return got, time.time() - start
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s: {what}")


def capi(env, c):
    """(namespace, CAPI cluster name, Service, server name, network id)."""
    ns = f"magnum-{env.ks['tenant']}"
    [cl] = [x for x in env.sim.items(env.sim.capi, "clusters", ns=ns)
            if x["metadata"]["labels"].get("magnum.openstack.org/cluster-uuid") == c["uuid"]]
    name = cl["metadata"]["name"]
    osc = env.sim.get(f"/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/{ns}/openstackclusters/{name}")
    svc = f"{name}-apiserver"
    return ns, name, svc, f"{svc}.{ns}.svc", osc["status"]["network"]["id"]


def slices(env, ns, svc):
    return {s["metadata"]["labels"]["magnum.openstack.org/api-proxy-host"]: s
            for s in env.sim.items(SLICES, "endpointslices", f"kubernetes.io/service-name={svc}", ns=ns)}


def kubectl_via(env, name, proxy, server_name):
    """`kubectl get nodes` with the user's kubeconfig from `cluster config`,
    pointed at a proxy with the cluster's proxy name as TLS server name
    (what CAPI's pods get from the management cluster's DNS)."""
    d = env.tmp / f"config-{name}"
    d.mkdir(exist_ok=True)
    env.coe("cluster", "config", name, "--dir", str(d), "--force")
    text = (d / "config").read_text()
    via = re.sub(r"^(\s*)server: .*$",
                 lambda m: f"{m.group(1)}server: https://{proxy.addr}:{proxy.port}\n"
                           f"{m.group(1)}tls-server-name: {server_name}", text, count=1, flags=re.M)
    path = d / f"via-{proxy.host}"
    path.write_text(via)
    p = subprocess.run(["kubectl", "--kubeconfig", str(path), "get", "nodes", "-o", "name"],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, sorted(x.split("/", 1)[1] for x in p.stdout.split()), p.stderr


def apiserver_flags(ns, name):
    """The command line of cluster `name`'s workload kube-apiserver."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        args = [a.decode() for a in args if a]
        if args and args[0].endswith("kube-apiserver") and f"--etcd-prefix=/capi-sim-workload/{ns}/{name}" in args:
            return args
    raise AssertionError(f"no workload kube-apiserver for {ns}/{name}")


def certificate_names(proxy, server_name):
    """The DNS names and addresses of the certificate a cluster serves,
    reached through a proxy by its server name."""
    from cryptography import x509
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection((proxy.addr, proxy.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
            der = tls.getpeercert(binary_form=True)
    san = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return set(san.get_values_for_type(x509.DNSName)) | {str(a) for a in san.get_values_for_type(x509.IPAddress)}


def machines(env, ns, name):
    return sorted(m["metadata"]["name"] for m in env.sim.items(
        env.sim.capi, "machines", f"cluster.x-k8s.io/cluster-name={name}", ns=ns)
        if not m["metadata"].get("deletionTimestamp"))


def netns():
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


def test_clusters_without_floating_ips(env):
    assert os.path.exists(PROXY_BIN), f"{PROXY_BIN}: build the workspace first"
    t = env.coe("cluster", "template", "create", "private", "--image", "ubuntu-2204-kube-v1.30.4", *COMMON,
                *labels("kube_tag=v1.30.4", "master_lb_floating_ip_enabled=false"), "-f", "json")
    assert t["labels"]["api_server_tls_cipher_suites"] == \
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", t["labels"]

    # No proxy host yet: the create waits, and says why.
    env.coe("cluster", "create", "one", "--cluster-template", "private", "--master-count", "1",
            "--node-count", "1")
    c, seen = env.wait("one", lambda c: "magnum-capi-proxy" in ((c or {}).get("status_reason") or ""),
                       timeout=240)
    assert c["status"] == "CREATE_IN_PROGRESS", seen
    ns, name1, svc1, sni1, net1 = capi(env, c)
    assert f"no magnum-capi-proxy host reaches network {net1}" in c["status_reason"], c
    assert f"qdhcp-{net1}" in netns(), "capi-sim put the API behind the network's namespace"
    # What the conductor published for it.
    svc = env.sim.get(f"/api/v1/namespaces/{ns}/services/{svc1}")
    assert svc["metadata"]["labels"]["magnum.openstack.org/api-proxy"] == name1
    assert "selector" not in svc["spec"], svc["spec"]
    osc = env.sim.get(f"/apis/infrastructure.cluster.x-k8s.io/v1beta1/namespaces/{ns}/openstackclusters/{name1}")
    assert osc["spec"]["disableAPIServerFloatingIP"] is True
    kcp = env.sim.items(f"controlplane.cluster.x-k8s.io/{env.line}", "kubeadmcontrolplanes",
                        f"cluster.x-k8s.io/cluster-name={name1}", ns=ns)[0]
    assert kcp["spec"]["kubeadmConfigSpec"]["clusterConfiguration"]["apiServer"]["certSANs"] == [sni1, "api.example.com"]

    # Two network hosts.
    env.proxies = [Proxy(env, "net-a", env.hosts[0].addr), Proxy(env, "net-b", env.hosts[1].addr)]
    a, b = env.proxies
    c, seen = env.wait("one", settled, timeout=240)
    assert c["status"] == "CREATE_COMPLETE", seen
    env.coe("cluster", "create", "two", "--cluster-template", "private", "--master-count", "1",
            "--node-count", "1")
    c2, seen = env.wait("two", settled, timeout=240)
    assert c2["status"] == "CREATE_COMPLETE", seen
    _, name2, svc2, sni2, net2 = capi(env, c2)
    assert net1 != net2
    # The cluster's own endpoint stays its api_address: the same private
    # address in both overlapping networks.
    assert c["api_address"] == c2["api_address"] == "https://10.0.0.10:6443", (c, c2)
    assert set(slices(env, ns, svc1)) == set(slices(env, ns, svc2)) == {"net-a", "net-b"}
    for s in slices(env, ns, svc1).values():
        assert s["endpoints"][0]["conditions"]["ready"] is True
        assert s["metadata"]["ownerReferences"][0]["name"] == svc1

    # Each name reaches its own cluster, with the user's own certificate.
    for name, sni, capi_name in (("one", sni1, name1), ("two", sni2, name2)):
        for p in (a, b):
            rc, nodes, err = kubectl_via(env, name, p, sni)
            assert rc == 0, err
            assert nodes == machines(env, ns, capi_name), (name, nodes)
    m = a.metrics()
    assert m['magnum_capi_proxy_clusters{state="up"}'] == 2, m

    # The API server labels reached the real workload apiserver: it runs
    # with their flags, and its certificate names the extra name.
    flags = apiserver_flags(ns, name1)
    for f in ("--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
              "--enable-admission-plugins=NodeRestriction,AlwaysPullImages",
              "--oidc-issuer-url=https://issuer.example.com", "--oidc-client-id=kubernetes",
              "--oidc-username-claim=sub", "--oidc-groups-claim=groups"):
        assert f in flags, (f, flags)
    names = certificate_names(a, sni1)
    assert {sni1, "api.example.com", "10.0.0.10"} <= names, names
    assert m["magnum_capi_proxy_connections_total"] >= 2, m

    # Cut one network's link on this host: both hosts withdraw that
    # cluster's slices within the bound; the other cluster keeps its own.
    dev = subprocess.run(["ip", "-n", f"qdhcp-{net1}", "-o", "link", "show", "type", "veth"],
                         capture_output=True, text=True, check=True).stdout.split(":")[1].strip().split("@")[0]
    subprocess.run(["ip", "-n", f"qdhcp-{net1}", "link", "set", dev, "down"], check=True)
    _, took = until("cluster one's slices withdrawn", lambda: slices(env, ns, svc1) == {}, 10 * WITHDRAW_BOUND)
    print(f"slices withdrawn {took:.1f} s after the cut (bound {WITHDRAW_BOUND} s)")
    assert took <= WITHDRAW_BOUND + SLACK, f"withdrawn after {took:.1f} s, bound {WITHDRAW_BOUND} s"
    assert set(slices(env, ns, svc2)) == {"net-a", "net-b"}
    rc, _, _ = kubectl_via(env, "one", a, sni1)
    assert rc != 0, "no path to a cut network"
    subprocess.run(["ip", "-n", f"qdhcp-{net1}", "link", "set", dev, "up"], check=True)
    until("cluster one's slices back", lambda: set(slices(env, ns, svc1)) == {"net-a", "net-b"}, 60)

    # A proxy killed and restarted serves both again.
    a.kill()
    a.start()
    until("net-a up for both clusters",
          lambda: a.metrics().get('magnum_capi_proxy_clusters{state="up"}') == 2, 60)
    for name, sni, capi_name in (("one", sni1, name1), ("two", sni2, name2)):
        rc, nodes, err = kubectl_via(env, name, a, sni)
        assert rc == 0 and nodes == machines(env, ns, capi_name), err

    # One host dead: its slices expire (deleted by the other), and CAPI's
    # controllers still reach the cluster through the other: a resize
    # completes.
    b.kill()
    _, took = until("net-b's slices expired",
                    lambda: all(set(slices(env, ns, s)) == {"net-a"} for s in (svc1, svc2)), 10 * EXPIRY_BOUND)
    print(f"a dead host's slices deleted {took:.1f} s after it died (bound {EXPIRY_BOUND} s)")
    assert took <= EXPIRY_BOUND + SLACK, f"after {took:.1f} s, bound {EXPIRY_BOUND} s"
    env.coe("cluster", "resize", "two", "2")
    c2, seen = env.wait("two", lambda c: settled(c) and c["node_count"] == 2, timeout=240)
    assert c2["status"] == "UPDATE_COMPLETE", seen
    rc, nodes, err = kubectl_via(env, "two", a, sni2)
    assert rc == 0 and len(nodes) == 3 and nodes == machines(env, ns, name2), (nodes, err)

    # An upgrade replaces every machine; CAPI sees each new Node through
    # the proxy before the rollout moves on.
    env.coe("cluster", "template", "create", "private-131", "--image", "ubuntu-2204-kube-v1.31.1", *COMMON,
            *labels("kube_tag=v1.31.1", "master_lb_floating_ip_enabled=false"), "-f", "json")
    env.coe("cluster", "upgrade", "two", "private-131")
    c2, seen = env.wait("two", lambda c: settled(c) and c["coe_version"] == "v1.31.1", timeout=300)
    assert c2["status"] == "UPDATE_COMPLETE", seen
    rc, nodes, err = kubectl_via(env, "two", a, sni2)
    assert rc == 0 and nodes == machines(env, ns, name2), (nodes, err)

    # Delete: nothing of either is left (Service, slices, namespaces).
    for name in ("one", "two"):
        env.coe("cluster", "delete", name)
    for name in ("one", "two"):
        env.wait(name, lambda c: c is None, timeout=240)
    until("Services and slices gone", lambda: not any(
        env.sim.get(f"/api/v1/namespaces/{ns}/services/{s}") for s in (svc1, svc2))
        and not any(slices(env, ns, s) for s in (svc1, svc2)), 60)
    until("namespaces gone", lambda: not ({f"qdhcp-{net1}", f"qdhcp-{net2}"} & netns())
          and not any(n.startswith("capi-sim-vm-") for n in netns()), 60)
