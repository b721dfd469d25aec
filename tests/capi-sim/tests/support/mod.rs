//! Helpers shared by the simulator's integration tests: an in-process
//! simulator, dynamic APIs, polling, and one cluster's object set.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use capi_sim::resources::Line;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, Config};
use serde_json::{Value, json};

pub async fn start(line: Line) -> (Client, capi_sim::Sim) {
    start_with(line, Some(Duration::from_millis(5))).await
}

/// An in-process simulator whose controllers tick every `tick` (None: the
/// test runs the passes itself).
pub async fn start_with(line: Line, tick: Option<Duration>) -> (Client, capi_sim::Sim) {
    let crds = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/crds");
    let (addr, sim) = capi_sim::serve_in_process(&crds, line, tick).await.unwrap();
    (
        Client::try_from(Config::new(format!("http://{addr}").parse().unwrap())).unwrap(),
        sim,
    )
}

pub fn api(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural),
    )
}

pub async fn eventually<F, Fut>(sim: &capi_sim::Sim, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..2000 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let dump = sim.read(|s| s.dump());
    let brief: Vec<String> = dump["objects"]
        .as_object()
        .map(|m| {
            m.iter()
                .flat_map(|(k, v)| {
                    v.as_array()
                        .cloned()
                        .unwrap_or_default()
                        .into_iter()
                        .map(move |o| {
                            format!(
                                "{k}/{} status={}",
                                o["metadata"]["name"].as_str().unwrap_or(""),
                                o.get("status").map(|s| s.to_string()).unwrap_or_default()
                            )
                        })
                })
                .collect()
        })
        .unwrap_or_default();
    panic!(
        "timed out waiting for {what}; controller errors: {:?}\n{}",
        sim.controller_errors(),
        brief.join("\n")
    );
}

pub fn objects(v2: bool) -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let capi = if v2 {
        "cluster.x-k8s.io/v1beta2"
    } else {
        "cluster.x-k8s.io/v1beta1"
    };
    let kcp_api = if v2 {
        "controlplane.cluster.x-k8s.io/v1beta2"
    } else {
        "controlplane.cluster.x-k8s.io/v1beta1"
    };
    let boot_api = if v2 {
        "bootstrap.cluster.x-k8s.io/v1beta2"
    } else {
        "bootstrap.cluster.x-k8s.io/v1beta1"
    };
    let infra = "infrastructure.cluster.x-k8s.io/v1beta1";
    let r = |api_group: &str, api_version: &str, kind: &str, name: &str| {
        if v2 {
            json!({"apiGroup": api_group, "kind": kind, "name": name})
        } else {
            json!({"apiVersion": api_version, "kind": kind, "name": name})
        }
    };
    let omt = |name: &str| {
        json!({"apiVersion": infra, "kind": "OpenStackMachineTemplate", "metadata": {"name": name},
        "spec": {"template": {"spec": {"flavor": "m1.medium", "image": {"filter": {"name": "ubuntu-2204-kube-v1.30.4"}}}}}})
    };
    let cp_infra = r(
        "infrastructure.cluster.x-k8s.io",
        infra,
        "OpenStackMachineTemplate",
        "c1-cp",
    );
    let machine_template = if v2 {
        json!({"spec": {"infrastructureRef": cp_infra}})
    } else {
        json!({"infrastructureRef": cp_infra})
    };
    vec![
        (
            "infrastructure.cluster.x-k8s.io",
            "OpenStackCluster",
            "openstackclusters",
            json!({"apiVersion": infra, "kind": "OpenStackCluster",
            "metadata": {"name": "c1"}, "spec": {"identityRef": {"name": "c1-cloud-config", "cloudName": "openstack"}}}),
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "OpenStackMachineTemplate",
            "openstackmachinetemplates",
            omt("c1-cp"),
        ),
        (
            "infrastructure.cluster.x-k8s.io",
            "OpenStackMachineTemplate",
            "openstackmachinetemplates",
            omt("c1-md"),
        ),
        (
            "bootstrap.cluster.x-k8s.io",
            "KubeadmConfigTemplate",
            "kubeadmconfigtemplates",
            json!({"apiVersion": boot_api, "kind": "KubeadmConfigTemplate",
            "metadata": {"name": "c1-md"}, "spec": {"template": {"spec": {}}}}),
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
            json!({"apiVersion": kcp_api, "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp"}, "spec": {"replicas": 3, "version": "v1.30.4", "kubeadmConfigSpec": {}, "machineTemplate": machine_template}}),
        ),
        (
            "cluster.x-k8s.io",
            "Cluster",
            "clusters",
            json!({"apiVersion": capi, "kind": "Cluster", "metadata": {"name": "c1", "labels": {"magnum.openstack.org/cluster": "c1"}},
            "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.100.0.0/16"]}},
                     "infrastructureRef": r("infrastructure.cluster.x-k8s.io", infra, "OpenStackCluster", "c1"),
                     "controlPlaneRef": r("controlplane.cluster.x-k8s.io", kcp_api, "KubeadmControlPlane", "c1-cp")}}),
        ),
        (
            "cluster.x-k8s.io",
            "MachineDeployment",
            "machinedeployments",
            json!({"apiVersion": capi, "kind": "MachineDeployment",
            "metadata": {"name": "c1-md", "labels": {"cluster.x-k8s.io/cluster-name": "c1"}},
            "spec": {"clusterName": "c1", "replicas": 2, "selector": {"matchLabels": {"cluster.x-k8s.io/deployment-name": "c1-md"}},
                     "template": {"spec": {"clusterName": "c1", "version": "v1.30.4",
                         "bootstrap": {"configRef": r("bootstrap.cluster.x-k8s.io", boot_api, "KubeadmConfigTemplate", "c1-md")},
                         "infrastructureRef": r("infrastructure.cluster.x-k8s.io", infra, "OpenStackMachineTemplate", "c1-md")}}}}),
        ),
        (
            "cluster.x-k8s.io",
            "MachineHealthCheck",
            "machinehealthchecks",
            json!({"apiVersion": capi, "kind": "MachineHealthCheck", "metadata": {"name": "c1"},
                   "spec": {"clusterName": "c1", "selector": {"matchLabels": {"cluster.x-k8s.io/cluster-name": "c1"}}}}),
        ),
        (
            "addons.cluster.x-k8s.io",
            "HelmChartProxy",
            "helmchartproxies",
            json!({"apiVersion": "addons.cluster.x-k8s.io/v1alpha1", "kind": "HelmChartProxy", "metadata": {"name": "ccm"},
                   "spec": {"clusterSelector": {"matchLabels": {"magnum.openstack.org/cluster": "c1"}},
                            "chartName": "openstack-cloud-controller-manager", "repoURL": "https://kubernetes.github.io/cloud-provider-openstack",
                            "version": "2.30.0", "valuesTemplate": "cluster: {{ .Cluster.metadata.name }}"}}),
        ),
        (
            "addons.cluster.x-k8s.io",
            "ClusterResourceSet",
            "clusterresourcesets",
            json!({"apiVersion": if v2 { "addons.cluster.x-k8s.io/v1beta2" } else { "addons.cluster.x-k8s.io/v1beta1" },
                   "kind": "ClusterResourceSet", "metadata": {"name": "c1-cni"},
                   "spec": {"clusterSelector": {"matchLabels": {"magnum.openstack.org/cluster": "c1"}},
                            "resources": [{"kind": "Secret", "name": "c1-calico"}]}}),
        ),
    ]
}

/// Server-side apply the object set, as the conductor will, after `tweak`.
pub async fn apply_all(client: &Client, v2: bool, tweak: impl Fn(&str, &mut Value)) {
    let apply = PatchParams::apply("magnum-conductor");
    for (group, kind, plural, mut obj) in objects(v2) {
        tweak(kind, &mut obj);
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let ver = obj["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        api(client, group, &ver, kind, plural)
            .patch(&name, &apply, &Patch::Apply(obj))
            .await
            .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
    }
}
