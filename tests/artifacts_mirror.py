#!/usr/bin/env python3
"""A local mirror of the upstream artifacts scripts/fetch-artifacts.sh takes
(issue 30), in the upstream layout, built from a copy this team keeps
(`../shared`: the kube binaries xz-compressed with their SHA256SUMS, the CRD
folders of both CAPI lines), served over HTTP on 127.0.0.1:

    kubernetes/release/v1.28.7/bin/linux/amd64/<binary>          (+ .sha256)
    github/<repository>/<tag>/<path>                             (artifacts.lock)
    github/<repository>/<ref>/<path>                             (charts.lock: ../shared/charts)

No machine of this team reaches dl.k8s.io or GitHub: the tests and CI's
stand-alone run (.ci/run) fetch through this mirror what a user's machine
fetches from upstream, byte for byte the same files.

    tests/artifacts_mirror.py --from ../shared --dir DIR [--ready-file F]

builds DIR, then serves it until killed, writing its base URL to F.
Standard library only."""
import argparse
import http.server
import lzma
import os
import shutil
import threading

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
K8S = "kubernetes/release/v1.28.7/bin/linux/amd64"
BINARIES = ("kube-apiserver", "kube-controller-manager")


def lock():
    """The CRD rows of scripts/artifacts.lock: (kind, folder, repository, tag, path, sha256)."""
    with open(os.path.join(ROOT, "scripts", "artifacts.lock")) as f:
        return [ln.split() for ln in f if ln.startswith("crd ")]


def chart_files():
    """The rows of scripts/charts.lock: (repository, ref, path)."""
    with open(os.path.join(ROOT, "scripts", "charts.lock")) as f:
        return [tuple(ln.split()[3:6]) for ln in f if ln.startswith("chart ")]


def build(shared, root):
    """Lay `shared`'s files out in the upstream layout under `root`."""
    os.makedirs(os.path.join(root, K8S), exist_ok=True)
    with open(os.path.join(shared, "k8s", "SHA256SUMS")) as f:
        sums = dict(reversed(ln.split()) for ln in f if ln.strip())
    for b in BINARIES:
        with lzma.open(os.path.join(shared, "k8s", f"{b}-v1.28.7-linux-amd64.xz")) as src, \
                open(os.path.join(root, K8S, b), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        with open(os.path.join(root, K8S, f"{b}.sha256"), "w") as f:
            f.write(sums[b] + "\n")
    for _, folder, repo, tag, path, _ in lock():
        out = os.path.join(root, "github", repo, tag, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copy(os.path.join(shared, "crds", folder, os.path.basename(path)), out)
    for repo, ref, path in chart_files():
        out = os.path.join(root, "github", repo, ref, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        shutil.copy(os.path.join(shared, "charts", "github", repo, ref, path), out)


def serve(root):
    """Serve `root` on a free loopback port; returns (server, base URL)."""
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(root), **k)

        def log_message(self, *a):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="shared", required=True, help="the kept copy (../shared)")
    ap.add_argument("--dir", required=True, help="where to lay out the mirror")
    ap.add_argument("--ready-file", help="receives the base URL once serving")
    a = ap.parse_args()
    build(a.shared, a.dir)
    server, url = serve(a.dir)
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(url + "\n")
        os.replace(tmp, a.ready_file)
    else:
        print(url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
