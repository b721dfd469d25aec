"""The offline list (issue 53): every chart and image a cluster's addons
and the conductor's own objects pull, and what points each at a mirror.

Made from what the conductor writes for a cluster with given labels
(`magnum-conductor cluster-objects`: the rows made as magnum-api makes them,
through the conductor's own rendering) and from the charts of its
HelmChartProxies rendered by the real Helm engine (helm_charts.py, at the
versions the configuration pins). `references(objects, rendered)` reads a
list out of objects, so the same reading applies to what a real cluster's
management cluster holds (test_labels_all.py compares the two).

    python tests/python/offline_list.py [--config-file magnum.conf] [--out FILE]

prints (or writes) the list for every addon on, with both network drivers
(`scripts/offline-list.sh`; `deploy/offline/images.txt` is its output for
the default configuration, and test_offline_list.py checks it is current).
"""
import argparse
import json
import os
import subprocess
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import helm_charts  # noqa: E402

# `[capi]` options that move each chart's repository, by chart name
# (common/src/config/mod.rs: `<addon>_chart_repo`).
CHART_OPTIONS = {
    "tigera-operator": "calico_chart_repo",
    "cilium": "cilium_chart_repo",
    "openstack-cloud-controller-manager": "occm_chart_repo",
    "openstack-cinder-csi": "cinder_csi_chart_repo",
    "metrics-server": "metrics_server_chart_repo",
    "ingress-nginx": "ingress_nginx_chart_repo",
    "kube-prometheus-stack": "monitoring_chart_repo",
    "openstack-manila-csi": "manila_csi_chart_repo",
    "csi-driver-nfs": "nfs_csi_chart_repo",
}
PREFIX = "label container_infra_prefix"
# kubeadm's control-plane components, pulled at the KubeadmControlPlane's
# (and each MachineDeployment's) version from its imageRepository
# (registry.k8s.io unless set: the conductor does not set it).
KUBEADM = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
# Every addon on (with one network driver at a time).
EVERY_ADDON = {
    "kube_tag": "v1.30.4",
    "auto_scaling_enabled": "true", "min_node_count": "1", "max_node_count": "3",
    "metrics_server_enabled": "true", "ingress_controller": "nginx", "monitoring_enabled": "true",
    "keystone_auth_enabled": "true", "manila_csi_enabled": "true",
    "manila_csi_share_network_id": "5e2a3c1d-7b8f-4e6a-9c0d-1f2e3a4b5c6d",
}
NETWORK_DRIVERS = {"calico": {}, "cilium": {"cilium_hubble_ui_enabled": "true"}}


def pod_images(obj):
    return helm_charts.images([(None, obj)])


def references(objects, rendered):
    """{(kind, reference): mirror} of the conductor's `objects` (dicts, as
    on the management cluster) and `rendered` ({HelmChartProxy name:
    [(template, object)]} as the real Helm renders each proxy's chart)."""
    out = {}
    for o in objects:
        kind = o.get("kind")
        if kind == "HelmChartProxy":
            s = o["spec"]
            out[("chart", f"{s['repoURL']} {s['chartName']} {s['version']}")] = \
                f"[capi] {CHART_OPTIONS.get(s['chartName'], '?')}"
        elif kind in ("KubeadmControlPlane", "MachineDeployment"):
            version = o["spec"].get("version") or o["spec"].get("template", {}).get("spec", {}).get("version")
            cc = o["spec"].get("kubeadmConfigSpec", {}).get("clusterConfiguration", {})
            repo = cc.get("imageRepository") or "registry.k8s.io"
            for c in KUBEADM if kind == "KubeadmControlPlane" else ("kube-proxy",):
                out[("image", f"{repo}/{c}:{version}")] = "the node image (kubeadm; no imageRepository is set)"
        elif kind == "ConfigMap":
            # A ClusterResourceSet's content: manifests for the workload cluster.
            for text in (o.get("data") or {}).values():
                try:
                    docs = list(yaml.safe_load_all(text))
                except yaml.YAMLError:
                    continue
                for d in docs:
                    if isinstance(d, dict) and d.get("kind"):
                        for i in pod_images(d):
                            out[("image", i)] = PREFIX
        for i in pod_images(o):
            out[("image", i)] = PREFIX if kind != "Deployment" else f"{PREFIX}, or [capi] autoscaler_image"
    versions = {o["spec"]["chartName"]: o["spec"]["version"] for o in objects if o.get("kind") == "HelmChartProxy"}
    for objs in rendered.values():
        # A Helm test hook's Pod runs only under `helm test`, which CAAPH
        # never runs: not pulled.
        objs = [(p, o) for p, o in objs
                if "test" not in ((o.get("metadata") or {}).get("annotations") or {}).get("helm.sh/hook", "")]
        for i in helm_charts.images(objs):
            out[("image", i)] = PREFIX
        for _, o in objs:
            spec = o.get("spec") or {}
            # What prometheus-operator runs for its resources: the image
            # each names, and the config reloader its arguments name.
            if o["kind"] in ("Prometheus", "Alertmanager", "ThanosRuler") and spec.get("image"):
                out[("image", spec["image"])] = PREFIX
            for c in pod_images_args(o):
                out[("image", c)] = PREFIX
            # The tigera operator makes Calico's own workloads at run time,
            # from the Installation's registry, at the chart's Calico
            # version: named here, not listed image by image.
            if o["kind"] == "Installation":
                reg = (spec.get("registry") or "docker.io").rstrip("/")
                path = spec.get("imagePath") or "calico"
                out[("operator", f"tigera-operator pulls {reg}/{path}/*:{versions.get('tigera-operator', '?')}")] = \
                    f"{PREFIX} (the Installation's registry)"
    return out


def pod_images_args(o):
    """Images a container's arguments name (`--prometheus-config-reloader=`)."""
    spec = (o.get("spec") or {}).get("template", {}).get("spec") or {}
    return [a.split("=", 1)[1] for c in spec.get("containers") or [] for a in c.get("args") or []
            if a.startswith("--prometheus-config-reloader=")]


def render(hcps):
    """{proxy name: [(template, object)]}, one engine process for all."""
    hcps = list(hcps)
    jobs = [(h["spec"]["chartName"], h["spec"]["version"], helm_charts.values_of(h), h["spec"]["releaseName"],
             h["spec"]["namespace"]) for h in hcps]
    return {h["metadata"]["name"]: helm_charts.objects(r) for h, r in zip(hcps, helm_charts.render_many(jobs))}


def cluster_objects(conductor, config_files, labels, network_driver, line="v1beta2"):
    """What `magnum-conductor cluster-objects` prints for these labels."""
    argv = [conductor] + [a for f in config_files for a in ("--config-file", f)] + [
        "cluster-objects", "--network-driver", network_driver, "--line", line]
    argv += [a for k, v in sorted(labels.items()) for a in ("--label", f"{k}={v}")]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{' '.join(argv)}: {p.stderr}"
    return json.loads(p.stdout)


def generate(conductor, config_files, labels, network_driver, line="v1beta2"):
    objs = cluster_objects(conductor, config_files, labels, network_driver, line)
    return references(objs, render(o for o in objs if o["kind"] == "HelmChartProxy"))


def text(refs, labels):
    """The list as a file: a header, then `chart URL NAME VERSION  # mirror`
    and `image REF  # mirror` lines, sorted."""
    width = max(len(f"{k} {r}") for k, r in refs)
    lines = [
        "# Every chart and image a cluster pulls, with every addon on (both network drivers),",
        "# and what moves each to a mirror (an image's place under the template label",
        "# container_infra_prefix is shown). Generated by scripts/offline-list.sh (do not edit);",
        "# tests/python/test_offline_list.py checks it is current, test_labels_all.py that it is",
        "# what a real cluster with these addons references.",
        f"# Labels: {' '.join(f'{k}={v}' for k, v in sorted(labels.items()))}",
        "# kubeadm also pulls etcd, coredns and pause at the versions it pins for the Kubernetes",
        "# version (`kubeadm config images list --kubernetes-version <kube_tag>`): the node image",
        "# (image-builder pre-pulls them) or the nodes' containerd registry mirror provides them.",
    ]
    for (kind, ref), mirror in sorted(refs.items()):
        lines.append(f"{f'{kind} {ref}':<{width}}  # {mirror}")
    return "\n".join(lines) + "\n"


# The prefix the list shows each image's place under (any registry path).
SHOWN_PREFIX = "<prefix>"


def under_prefix(refs, prefixed):
    """Each image of `refs` with where the cluster pulls it from under
    `container_infra_prefix` (`prefixed`: the same cluster's references
    with the prefix SHOWN_PREFIX), paired by name and tag: not every image
    keeps its upstream path under the prefix (the cluster autoscaler's
    does not)."""
    by_name = {}
    for kind, ref in prefixed:
        if kind == "image" and ref.startswith(SHOWN_PREFIX + "/"):
            by_name.setdefault(ref.rsplit("/", 1)[1], []).append(ref)
    out = {}
    for (kind, ref), mirror in refs.items():
        there = by_name.get(ref.rsplit("/", 1)[1], []) if kind == "image" else []
        if mirror.startswith(PREFIX) and len(there) == 1:
            mirror = mirror.replace(PREFIX, f"{PREFIX}: {there[0]}", 1)
        out[(kind, ref)] = mirror
    return out


def default_list(conductor, config_files):
    refs = {}
    for nd, extra in NETWORK_DRIVERS.items():
        labels = dict(EVERY_ADDON, **extra)
        prefixed = generate(conductor, config_files, dict(labels, container_infra_prefix=SHOWN_PREFIX), nd)
        refs.update(under_prefix(generate(conductor, config_files, labels, nd), prefixed))
    labels = dict(EVERY_ADDON, **{k: v for extra in NETWORK_DRIVERS.values() for k, v in extra.items()})
    return text(refs, labels)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conductor", default=os.environ.get("MAGNUM_CONDUCTOR_BIN", "magnum-conductor"))
    ap.add_argument("--config-file", action="append", default=[])
    ap.add_argument("--out")
    a = ap.parse_args()
    out = default_list(a.conductor, a.config_file)
    if a.out:
        with open(a.out, "w") as f:
            f.write(out)
    else:
        sys.stdout.write(out)


if __name__ == "__main__":
    main()
