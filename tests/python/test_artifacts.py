"""scripts/fetch-artifacts.sh (issue 30, first part): what the project needs
from upstream (the Kubernetes control plane, the CAPI lines' CRDs) it gets
itself when ../shared is not there, verified. No machine here reaches
dl.k8s.io or GitHub, so the fetch runs against a local HTTP server serving
copies of ../shared's files in the upstream layout (the kube binaries with
the `.sha256` files a Kubernetes release publishes beside them; each CRD at
`github/<repository>/<tag>/<path>`), through MAGNUM_RS_ARTIFACTS_MIRROR:
a good mirror, a corrupt file and a missing one. The CRD checksums in
scripts/artifacts.lock are those of the files at the upstream tags (checked
against the projects' own repositories when the lock was written)."""
import hashlib
import http.server
import lzma
import os
import shutil
import subprocess
import threading

import pytest

from conftest import ROOT

SHARED = os.path.join(ROOT, "..", "shared")
SCRIPT = os.path.join(ROOT, "scripts", "fetch-artifacts.sh")
K8S = "kubernetes/release/v1.28.7/bin/linux/amd64"

pytestmark = pytest.mark.skipif(not os.path.isdir(os.path.join(SHARED, "k8s")),
                                reason="the mirror is built from ../shared")


def lock():
    with open(os.path.join(ROOT, "scripts", "artifacts.lock")) as f:
        return [ln.split() for ln in f if ln.startswith("crd ")]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """(folder, URL) of a mirror in the upstream layout, served over HTTP."""
    root = tmp_path_factory.mktemp("mirror")
    os.makedirs(root / K8S)
    sums = dict(reversed(ln.split()) for ln in open(os.path.join(SHARED, "k8s", "SHA256SUMS")))
    for b in ("kube-apiserver", "kube-controller-manager"):
        with lzma.open(os.path.join(SHARED, "k8s", f"{b}-v1.28.7-linux-amd64.xz")) as src, \
                open(root / K8S / b, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        (root / K8S / f"{b}.sha256").write_text(sums[b] + "\n")
    for _, folder, repo, tag, path, _ in lock():
        out = root / "github" / repo / tag / path
        os.makedirs(out.parent, exist_ok=True)
        shutil.copy(os.path.join(SHARED, "crds", folder, os.path.basename(path)), out)

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(root), **k)

        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def fetch(tmp_path, url):
    env = dict(os.environ, MAGNUM_RS_ARTIFACTS_MIRROR=url, MAGNUM_RS_CACHE=str(tmp_path / "cache"))
    for k in ("K8S_BIN_DIR", "CAPI_CRDS_DIR"):
        env.pop(k, None)
    return subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=600)


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
    assert not os.path.exists(tmp_path / "cache" / "artifacts" / "crds" / folder / os.path.basename(path))


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
