//! Helpers shared by the simulator's integration tests: the real control
//! plane of a line (shared by the tests of this binary, each in its own
//! namespace, with controllers scoped to it), dynamic APIs, polling, and
//! one cluster's object set.
#![allow(dead_code)]

use std::time::Duration;

use capi_sim::{Controllers, Line, Options};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub struct Env {
    pub client: Client,
    pub ns: String,
    pub line: Line,
    pub controllers: Controllers,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.controllers.stop();
    }
}

/// A namespace of its own on the line's shared control plane, and
/// controllers reconciling it (every 5 ms after a change).
pub async fn start(line: Line) -> Env {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cp = capi_sim::controlplane::shared(line);
    let client = cp.client().await.unwrap();
    let ns = format!("cs-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let nsapi: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("", "v1", "Namespace"),
            "namespaces",
        ),
    );
    nsapi
        .patch(
            &ns,
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await
        .unwrap();
    let mut o = Options::new(line);
    o.tick = Duration::from_millis(5);
    o.namespace_prefix = Some(ns.clone());
    let controllers = Controllers::start(client.clone(), o);
    controllers.wait_synced().await;
    Env {
        client,
        ns,
        line,
        controllers,
    }
}

impl Env {
    pub fn v2(&self) -> bool {
        self.line == Line::V1beta2
    }

    pub fn api(&self, group: &str, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            ),
        )
    }

    /// The CAPI core version of the line.
    pub fn capi(&self) -> &'static str {
        if self.v2() { "v1beta2" } else { "v1beta1" }
    }

    pub fn machines(&self) -> Api<DynamicObject> {
        self.api("cluster.x-k8s.io", self.capi(), "Machine", "machines")
    }

    pub async fn list(&self, api: &Api<DynamicObject>, selector: &str) -> Vec<DynamicObject> {
        api.list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
    }

    /// Server-side apply the object set, as the conductor will, after `tweak`.
    pub async fn apply_all(&self, tweak: impl Fn(&str, &mut Value)) {
        let apply = PatchParams::apply("magnum-conductor");
        for (group, kind, plural, mut obj) in objects(self.v2()) {
            tweak(kind, &mut obj);
            let name = obj["metadata"]["name"].as_str().unwrap().to_string();
            let ver = obj["apiVersion"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_string();
            self.api(group, &ver, kind, plural)
                .patch(&name, &apply, &Patch::Apply(obj))
                .await
                .unwrap_or_else(|e| panic!("{kind} {name}: {e}"));
        }
    }

    /// Wait (60 s at most) for `check`; on time-out, fail with what the
    /// namespace holds and the controller writes the apiserver refused.
    pub async fn eventually<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        for _ in 0..1200 {
            if check().await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut brief = Vec::new();
        for kind in capi_sim::kinds::Kind::ALL {
            if kind == capi_sim::kinds::Kind::Namespace {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &self.ns, &kind.api_resource(self.line));
            for o in api
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
            {
                brief.push(format!(
                    "{}/{} status={}",
                    kind.name(),
                    o.name_any(),
                    o.data
                        .get("status")
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                ));
            }
        }
        panic!(
            "timed out waiting for {what}; controller errors: {:?}\n{}",
            self.controllers.errors(),
            brief.join("\n")
        );
    }

    pub fn assert_no_controller_errors(&self) {
        let e = self.controllers.errors();
        assert!(e.is_empty(), "controller writes refused: {e:?}");
    }
}

pub fn running(ms: &[DynamicObject]) -> usize {
    ms.iter()
        .filter(|m| m.data.pointer("/status/phase") == Some(&json!("Running")))
        .count()
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
            "metadata": {"name": "c1-md"}, "spec": {"template": {"spec": {"format": "cloud-config"}}}}),
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "KubeadmControlPlane",
            "kubeadmcontrolplanes",
            json!({"apiVersion": kcp_api, "kind": "KubeadmControlPlane",
            "metadata": {"name": "c1-cp"}, "spec": {"replicas": 3, "version": "v1.30.4", "kubeadmConfigSpec": {"format": "cloud-config"}, "machineTemplate": machine_template}}),
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
