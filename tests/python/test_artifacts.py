"""scripts/fetch-artifacts.sh and scripts/k8s-up.sh (issue 30): what the
project needs from upstream (the Kubernetes control plane, the CAPI lines'
CRDs) it gets itself when ../shared is not there, verified, and runs. No machine here reaches
dl.k8s.io or GitHub, so the fetch runs against a local HTTP server serving
copies of ../shared's files in the upstream layout (the kube binaries with
the `.sha256` files a Kubernetes release publishes beside them; each CRD at
`github/<repository>/<tag>/<path>`; tests/artifacts_mirror.py), through
MAGNUM_RS_ARTIFACTS_MIRROR: a good mirror, a corrupt file and a missing one,
a control plane started from what was fetched, and the demo stopping on a
corrupt artifact before it starts anything. .ci/run runs the whole suite
and the demo through such a mirror. The CRD checksums in
scripts/artifacts.lock are those of the files at the upstream tags (checked
against the projects' own repositories when the lock was written)."""
import hashlib
import os
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests"))
import artifacts_mirror  # noqa: E402
from artifacts_mirror import K8S, lock  # noqa: E402

SHARED = os.path.join(ROOT, "..", "shared")
SCRIPT = os.path.join(ROOT, "scripts", "fetch-artifacts.sh")

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "k8s")),
                                reason="the mirror is built from ../shared")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """(folder, URL) of a mirror in the upstream layout, served over HTTP."""
    root = tmp_path_factory.mktemp("mirror")
    artifacts_mirror.build(SHARED, str(root))
    server, url = artifacts_mirror.serve(root)
    yield root, url
    server.shutdown()


def clean_env(tmp_path, url):
    """The environment of a user without ../shared: artifacts only from the
    mirror, into a cache of their own."""
    env = dict(os.environ, MAGNUM_RS_ARTIFACTS_MIRROR=url, MAGNUM_RS_ARTIFACTS_CACHE=str(tmp_path / "cache"))
    for k in ("K8S_BIN_DIR", "CAPI_CRDS_DIR"):
        env.pop(k, None)
    return env


def fetch(tmp_path, url):
    return subprocess.run(["bash", SCRIPT], env=clean_env(tmp_path, url), capture_output=True, text=True,
                          timeout=600)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def test_a_good_mirror_gives_verified_artifacts_and_a_second_run_fetches_nothing(mirror, tmp_path):
    root, url = mirror
    out = fetch(tmp_path, url)
    assert out.returncode == 0, out.stderr
    exports = dict(kv.split("=", 1) for kv in out.stdout.strip().splitlines()[-1].removeprefix("export ").split())
    k8s, crds = exports["K8S_BIN_DIR"], exports["CAPI_CRDS_DIR"]
    assert k8s.startswith(str(tmp_path)) and crds.startswith(str(tmp_path))
    for b in ("kube-apiserver", "kube-controller-manager"):
        assert os.access(os.path.join(k8s, b), os.X_OK)
        assert sha256(os.path.join(k8s, b)) == (root / K8S / f"{b}.sha256").read_text().strip()
    version = subprocess.run([os.path.join(k8s, "kube-apiserver"), "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == "Kubernetes v1.28.7"
    for _, folder, _, _, path, want in lock():
        assert sha256(os.path.join(crds, folder, os.path.basename(path))) == want
    # Both lines complete: every folder ../shared has, with every file.
    shared = {d for d in os.listdir(os.path.join(SHARED, "crds")) if os.path.isdir(os.path.join(SHARED, "crds", d))}
    assert set(os.listdir(crds)) == shared == {row[1] for row in lock()}
    for d in shared:
        assert sorted(os.listdir(os.path.join(crds, d))) == sorted(os.listdir(os.path.join(SHARED, "crds", d)))
    again = fetch(tmp_path, url)
    assert again.returncode == 0 and "fetching" not in again.stderr, again.stderr


def test_a_corrupt_crd_stops_naming_it_and_both_checksums(mirror, tmp_path):
    root, url = mirror
    _, folder, repo, tag, path, want = lock()[7]
    f = root / "github" / repo / tag / path
    good = f.read_bytes()
    try:
        f.write_bytes(good.replace(b"description", b"descriptiom", 1))
        out = fetch(tmp_path, url)
    finally:
        f.write_bytes(good)
    assert out.returncode != 0
    got = hashlib.sha256(good.replace(b"description", b"descriptiom", 1)).hexdigest()
    assert (f"{folder}/{os.path.basename(path)} from {url}/github/{repo}/{tag}/{path}: checksum mismatch: "
            f"expected {want}, got {got}") in out.stderr, out.stderr
    assert "MAGNUM_RS_ARTIFACTS_MIRROR" in out.stderr
    assert not os.path.exists(tmp_path / "cache" / "crds" / folder / os.path.basename(path))


def test_a_corrupt_binary_or_a_missing_file_stops_naming_it(mirror, tmp_path):
    root, url = mirror
    sums = root / K8S / "kube-controller-manager.sha256"
    good = sums.read_text()
    try:
        sums.write_text("0" * 64 + "\n")
        out = fetch(tmp_path / "a", url)
    finally:
        sums.write_text(good)
    assert out.returncode != 0
    assert (f"kube-controller-manager v1.28.7 from {url}/{K8S}/kube-controller-manager: checksum mismatch: "
            f"expected {'0' * 64}, got {good.strip()}") in out.stderr, out.stderr

    _, folder, repo, tag, path, _ = lock()[-1]
    f = root / "github" / repo / tag / path
    moved = f.with_suffix(".away")
    f.rename(moved)
    try:
        out = fetch(tmp_path / "b", url)
    finally:
        moved.rename(f)
    assert out.returncode != 0
    assert f"{folder}/{os.path.basename(path)}: could not fetch {url}/github/{repo}/{tag}/{path}" in out.stderr, \
        out.stderr


def test_a_mirror_that_swaps_a_binary_and_its_checksum_is_refused_naming_the_lock(mirror, tmp_path):
    """A mirror can swap a binary and the .sha256 beside it: the lock's
    own checksum refuses it (issue 52)."""
    root, url = mirror
    f, sums = root / K8S / "kube-apiserver", root / K8S / "kube-apiserver.sha256"
    good, good_sum = f.read_bytes(), sums.read_text()
    swapped = (root / K8S / "kube-controller-manager").read_bytes()
    swapped_sum = hashlib.sha256(swapped).hexdigest()
    try:
        f.write_bytes(swapped)
        sums.write_text(swapped_sum + "\n")
        out = fetch(tmp_path, url)
    finally:
        f.write_bytes(good)
        sums.write_text(good_sum)
    assert out.returncode != 0
    pinned = [ln.split() for ln in open(os.path.join(ROOT, "scripts", "artifacts.lock"))
              if ln.startswith("k8s kube-apiserver ")]
    assert pinned == [["k8s", "kube-apiserver", "v1.28.7", "linux/amd64", good_sum.strip(), "source"]], pinned
    assert (f"kube-apiserver v1.28.7 from {url}/{K8S}/kube-apiserver: sha256 {swapped_sum} is not a build "
            f"scripts/artifacts.lock pins for it (pinned: {good_sum.strip()} (source))") in out.stderr, out.stderr
    assert not os.path.exists(tmp_path / "cache" / "kubernetes-v1.28.7" / "kube-apiserver")


ARCHIVE = "kubernetes/release/v1.28.7/kubernetes-server-linux-amd64.tar.gz"


def test_the_release_archive_is_checked_by_its_sha512_and_brings_kubectl(mirror, tmp_path):
    """Where a source carries the release's server archive (dl.k8s.io
    always: the default home), the binaries come out of it once its sha512
    is the one the lock pins, kubectl with them at the control plane's
    version. A fake archive is refused naming the lock; the same archive
    under a lock that pins it (MAGNUM_RS_ARTIFACTS_LOCK, an operator's own
    builds) gives its three binaries, and a second run fetches nothing."""
    root, url = mirror
    members = tmp_path / "kubernetes" / "server" / "bin"
    members.mkdir(parents=True)
    for b in ("kube-apiserver", "kube-controller-manager"):
        (members / b).write_bytes((root / K8S / b).read_bytes())
    # Any kubectl stands in for the release's (none is kept here).
    (members / "kubectl").write_bytes(b"#!/bin/sh\necho kubectl from the archive\n")
    archive = root / ARCHIVE
    subprocess.run(["tar", "-czf", str(archive), "-C", str(tmp_path), "kubernetes/server/bin"], check=True)
    got512 = hashlib.sha512(archive.read_bytes()).hexdigest()
    pinned512 = next(ln.split()[3] for ln in open(os.path.join(ROOT, "scripts", "artifacts.lock"))
                     if ln.startswith("release kubernetes-server-linux-amd64.tar.gz v1.28.7 "))
    own_lock = tmp_path / "own.lock"
    own_lock.write_text(open(os.path.join(ROOT, "scripts", "artifacts.lock")).read().replace(pinned512, got512))
    try:
        out = fetch(tmp_path / "a", url)
        assert out.returncode != 0
        assert (f"kubernetes-server-linux-amd64.tar.gz v1.28.7 from {url}/{ARCHIVE}: sha512 mismatch: "
                f"expected {pinned512} (scripts/artifacts.lock), got {got512}") in out.stderr, out.stderr
        env = dict(clean_env(tmp_path / "b", url), MAGNUM_RS_ARTIFACTS_LOCK=str(own_lock))
        out = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        k8s = dict(kv.split("=", 1) for kv in out.stdout.split()[1:])["K8S_BIN_DIR"]
        for b in ("kube-apiserver", "kube-controller-manager", "kubectl"):
            assert sha256(os.path.join(k8s, b)) == sha256(members / b), b
            assert f"{b} v1.28.7: verified (the release's server archive, sha512 in {own_lock})" in out.stderr
        assert subprocess.run([os.path.join(k8s, "kubectl")], capture_output=True, text=True).stdout == \
            "kubectl from the archive\n"
        again = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
        assert again.returncode == 0 and "fetching" not in again.stderr, again.stderr
        # The lock decides, not the cache: under the project's lock the
        # cached binaries of that archive are fetched anew (and refused).
        again = subprocess.run(["bash", SCRIPT], env=clean_env(tmp_path / "b", url), capture_output=True,
                               text=True, timeout=600)
        assert again.returncode != 0 and "sha512 mismatch" in again.stderr, again.stderr
    finally:
        archive.unlink()


def test_a_control_plane_runs_from_what_was_fetched(mirror, tmp_path):
    _, url = mirror
    env = clean_env(tmp_path, url)
    d = tmp_path / "k8s"
    up = subprocess.run([os.path.join(ROOT, "scripts", "k8s-up.sh"), str(d), "--crds", "v1beta1"], env=env,
                        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    try:
        assert up.returncode == 0, up.stderr
        written = dict(ln.split("=", 1) for ln in up.stdout.split())
        assert written["K8S_BIN_DIR"] == str(tmp_path / "cache" / "kubernetes-v1.28.7")
        assert written["CRDS"] == "v1beta1"

        def kubectl(*args):
            p = subprocess.run(["kubectl", "--kubeconfig", str(d / "kubeconfig"), *args], capture_output=True,
                               text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            return p.stdout
        assert kubectl("version", "-o", "json").count('"gitVersion": "v1.28.7"') == 1
        labels = {c.split()[0]: c.split()[1] if len(c.split()) > 1 else "" for c in kubectl(
            "get", "crd", "-o", "custom-columns=N:.metadata.name,L:.metadata.labels.cluster\\.x-k8s\\.io/v1beta1",
            "--no-headers").splitlines()}
        # Every CRD of the line's three releases, one per lock row.
        assert len(labels) == sum(1 for row in lock() if row[1] in (
            "cluster-api-v1.10.10", "cluster-api-provider-openstack-v0.12.7", "cluster-api-addon-provider-helm-v0.4.2"))
        # The contract labels clusterctl sets: CAPI looks providers' versions up by them.
        assert labels["openstackclusters.infrastructure.cluster.x-k8s.io"] == "v1alpha7_v1beta1"
        assert labels["kubeadmcontrolplanes.controlplane.cluster.x-k8s.io"] == "v1beta1"
        assert labels["kubeadmconfigs.bootstrap.cluster.x-k8s.io"] == "v1beta1"
        assert labels["clusters.cluster.x-k8s.io"] == "<none>"
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "k8s-down.sh"), str(d)], timeout=60)
    assert not (d / "env").exists()


def test_the_demo_stops_on_a_corrupt_artifact_before_starting_anything(mirror, tmp_path):
    root, url = mirror
    f = root / K8S / "kube-apiserver.sha256"
    good = f.read_text()
    try:
        f.write_text("f" * 64 + "\n")
        demo = subprocess.run([os.path.join(ROOT, "scripts", "demo.sh")], env=clean_env(tmp_path, url),
                              capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    finally:
        f.write_text(good)
    assert demo.returncode != 0
    assert (f"kube-apiserver v1.28.7 from {url}/{K8S}/kube-apiserver: checksum mismatch: "
            f"expected {'f' * 64}, got {good.strip()}") in demo.stderr, demo.stderr
    # Set-up stopped at its first step: nothing built, started or created
    # (its MariaDB and RabbitMQ, its control plane).
    for later in ("cargo build", "MariaDB and RabbitMQ", "management cluster"):
        assert later not in demo.stdout, demo.stdout
    assert "[services]" not in demo.stderr, demo.stderr
    assert not os.path.exists(tmp_path / "cache" / "kubernetes-v1.28.7" / "kube-apiserver")


def test_nothing_but_the_fetch_reads_the_teams_copy():
    """The project stands alone: only scripts/fetch-artifacts.sh and
    scripts/fetch-charts.sh (no mirror named: they take ../shared's copy,
    offline) and the mirror of these tests know about ../shared."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    allowed = {"scripts/fetch-artifacts.sh", "scripts/fetch-charts.sh", "tests/artifacts_mirror.py", "tests/python/test_artifacts.py",
               ".ci/run", "docs/testing.md", "README.md"}
    readers = []
    for path in files:
        if path in allowed or not os.path.isfile(os.path.join(ROOT, path)):
            continue
        with open(os.path.join(ROOT, path), "rb") as fh:
            data = fh.read()
        if b"../shared" in data or b"shared-k8s" in data:
            readers.append(path)
    assert readers == []


CHARTS_SCRIPT = os.path.join(ROOT, "scripts", "fetch-charts.sh")


def fetch_charts(tmp_path, url):
    env = clean_env(tmp_path, url)
    env.pop("HELM_CHARTS_DIR", None)
    return subprocess.run(["bash", CHARTS_SCRIPT], env=env, capture_output=True, text=True, timeout=600)


def test_the_pinned_charts_come_verified_from_the_mirror_and_a_corrupt_one_stops_naming_it(mirror, tmp_path):
    """scripts/fetch-charts.sh (issue 47): every file of scripts/charts.lock
    fetched from github/<repository>/<ref>/<path> and verified; a second run
    fetches nothing; a file whose bytes differ from the lock's stops the
    fetch, naming the chart, the file, where it came from and both
    checksums, and leaves nothing of it in the cache."""
    root, url = mirror
    rows = [ln.split() for ln in open(os.path.join(ROOT, "scripts", "charts.lock")) if ln.startswith("chart ")]
    assert {r[1] for r in rows} >= {"openstack-cloud-controller-manager", "openstack-cinder-csi", "tigera-operator",
                                    "cilium", "kube-prometheus-stack", "grafana", "common"}
    out = fetch_charts(tmp_path / "good", url)
    assert out.returncode == 0, out.stderr
    charts = out.stdout.strip().splitlines()[-1].removeprefix("export HELM_CHARTS_DIR=")
    assert charts.startswith(str(tmp_path))
    for _, name, _, repo, ref, path, want in rows:
        assert sha256(os.path.join(charts, "github", repo, ref, path)) == want, (name, path)
    again = fetch_charts(tmp_path / "good", url)
    assert again.returncode == 0 and "fetching" not in again.stderr, again.stderr

    _, name, version, repo, ref, path, want = next(r for r in rows if r[1] == "openstack-cinder-csi"
                                                   and r[5].endswith("templates/secret.yaml"))
    f = root / "github" / repo / ref / path
    good = f.read_bytes()
    bad = good.replace(b"secret", b"secrets", 1)
    try:
        f.write_bytes(bad)
        out = fetch_charts(tmp_path / "bad", url)
    finally:
        f.write_bytes(good)
    assert out.returncode != 0
    assert (f"{name} {version} {path} from {url}/github/{repo}/{ref}/{path}: checksum mismatch: expected {want}, "
            f"got {hashlib.sha256(bad).hexdigest()}") in out.stderr, out.stderr
    assert not os.path.exists(tmp_path / "bad" / "cache" / "charts" / "github" / repo / ref / path)
