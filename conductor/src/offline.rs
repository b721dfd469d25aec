//! `magnum-conductor cluster-objects`: every object the conductor writes
//! for a cluster with given labels, without a database, a broker or a
//! management cluster (pure). The offline list (`scripts/offline-list.sh`,
//! `deploy/offline/`) is made from them: the charts of the HelmChartProxies
//! (rendered by the real Helm engine there for their images), the images of
//! the conductor's own objects (the cluster autoscaler, the Keystone
//! webhook's ClusterResourceSet) and the Kubernetes version and image
//! repository kubeadm pulls the control plane from.
//!
//! The rows are made as magnum-api makes a template and a cluster with
//! them, and go through the conductor's own way from rows to objects
//! ([`crate::lifecycle::rows::cluster_input`], then the renderers a create
//! runs), so the objects are the ones a real create writes for those labels.

use std::collections::BTreeMap;

use rpc_schema::ovo::{self, MagnumObject};
use serde_json::{Value, json};

use crate::capi::addons::{self, AddonCharts, CloudConfig};
use crate::capi::render::{self, CapiLine};
use crate::capi::{autoscaler, manila};
use crate::lifecycle::rows;

/// The uuid of the cluster the objects are rendered for (any would do: it
/// names objects and identities, never an image or a chart).
const UUID: &str = "0f0f0f0f-0000-4000-8000-000000000001";
const PROJECT: &str = "0f0f0f0f00004000800000000000000a";

/// What a cluster's objects are rendered from.
pub struct Request<'a> {
    pub line: CapiLine,
    pub labels: BTreeMap<String, String>,
    pub network_driver: &'a str,
    pub charts: &'a AddonCharts,
    pub autoscaler_image: &'a str,
    pub namespace_prefix: &'a str,
}

fn object(
    class: &'static ovo::ClassSpec,
    fields: &[(&str, Value)],
) -> Result<MagnumObject, String> {
    let mut o = MagnumObject::new(class);
    for (k, v) in fields {
        o.set(k, v.clone()).map_err(|e| format!("{k}: {e}"))?;
    }
    Ok(o)
}

/// The objects a create writes for a cluster of one master and one worker
/// with `r.labels` (a template's labels, as magnum-api stores them), on
/// the management cluster and, for ClusterResourceSets, in the workload
/// cluster. An error names a label the conductor refuses.
pub fn cluster_objects(r: &Request<'_>) -> Result<Vec<Value>, String> {
    let labels = serde_json::to_value(&r.labels).map_err(|e| e.to_string())?;
    let template = object(
        &ovo::CLUSTER_TEMPLATE,
        &[
            ("uuid", json!("0f0f0f0f-0000-4000-8000-000000000002")),
            ("image_id", json!("ubuntu-2204-kube")),
            ("network_driver", json!(r.network_driver)),
            ("labels", labels.clone()),
        ],
    )?;
    let cluster = object(
        &ovo::CLUSTER,
        &[
            ("uuid", json!(UUID)),
            ("project_id", json!(PROJECT)),
            ("stack_id", json!("offline-list")),
            ("labels", labels),
            ("master_lb_enabled", json!(true)),
            ("floating_ip_enabled", json!(true)),
        ],
    )?;
    let ng = |name: &str, role: &str| {
        object(
            &ovo::NODE_GROUP,
            &[
                ("name", json!(name)),
                ("role", json!(role)),
                ("is_default", json!(true)),
                ("node_count", json!(1)),
                ("flavor_id", json!("m1.small")),
                ("image_id", json!("ubuntu-2204-kube")),
            ],
        )
    };
    let ngs = [
        ng("default-master", "master")?,
        ng("default-worker", "worker")?,
    ];
    let (input, network_driver) =
        rows::cluster_input(r.line, r.namespace_prefix, &cluster, &template, &ngs)?;
    let cloud = CloudConfig {
        auth_url: "https://keystone.invalid/v3".into(),
        region: None,
        application_credential_id: "offline-list".into(),
        application_credential_secret: common::secret::Secret::new(String::new()),
        ca_file_content: None,
    };
    let mut out = render::render(&input);
    out.extend(addons::render(
        &input,
        &network_driver,
        r.charts,
        &cloud,
        &input.cluster_uuid,
    ));
    out.extend(manila::render_labelled(
        &input,
        r.charts,
        &cloud,
        true,
        &[],
        &input.cluster_uuid,
    ));
    // (None when autoscaling is off, as in a create.)
    out.extend(autoscaler::render(&input, r.autoscaler_image));
    Ok(out)
}

/// `KEY=VALUE` arguments as a label map; an argument without `=` is named.
pub fn parse_labels(args: &[String]) -> Result<BTreeMap<String, String>, String> {
    args.iter()
        .map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("label {a:?} is not KEY=VALUE"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(labels: &[(&str, &str)], network_driver: &'static str) -> Vec<Value> {
        let charts = AddonCharts::default();
        let r = Request {
            line: CapiLine::V1beta2,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            network_driver,
            charts: &charts,
            autoscaler_image: "registry.k8s.io/autoscaling/cluster-autoscaler",
            namespace_prefix: "magnum-",
        };
        cluster_objects(&r).unwrap_or_else(|e| panic!("{e}"))
    }

    fn kinds(objs: &[Value], kind: &str) -> usize {
        objs.iter().filter(|o| o["kind"] == kind).count()
    }

    #[test]
    fn every_addon_asked_for_is_rendered() {
        let bare = request(&[("kube_tag", "v1.30.4")], "calico");
        let all = request(
            &[
                ("kube_tag", "v1.30.4"),
                ("auto_scaling_enabled", "true"),
                ("min_node_count", "1"),
                ("max_node_count", "3"),
                ("metrics_server_enabled", "true"),
                ("ingress_controller", "nginx"),
                ("monitoring_enabled", "true"),
                ("keystone_auth_enabled", "true"),
                ("manila_csi_enabled", "true"),
            ],
            "cilium",
        );
        assert!(kinds(&all, "HelmChartProxy") > kinds(&bare, "HelmChartProxy"));
        assert_eq!(kinds(&bare, "Deployment"), 0);
        assert_eq!(kinds(&all, "Deployment"), 1, "the autoscaler");
        let kcp = all
            .iter()
            .find(|o| o["kind"] == "KubeadmControlPlane")
            .unwrap_or_else(|| panic!("no KubeadmControlPlane"));
        assert_eq!(kcp["spec"]["version"], "v1.30.4");
        let charts: Vec<&str> = all
            .iter()
            .filter(|o| o["kind"] == "HelmChartProxy")
            .filter_map(|o| o["spec"]["chartName"].as_str())
            .collect();
        assert!(charts.contains(&"cilium"), "{charts:?}");
        assert!(!charts.contains(&"tigera-operator"), "{charts:?}");
    }

    #[test]
    fn a_label_the_conductor_refuses_is_an_error_not_a_list() {
        let charts = AddonCharts::default();
        let r = Request {
            line: CapiLine::V1beta1,
            labels: parse_labels(&["kube_tag=not-a-version".into()]).unwrap_or_default(),
            network_driver: "calico",
            charts: &charts,
            autoscaler_image: "x",
            namespace_prefix: "magnum-",
        };
        assert!(cluster_objects(&r).is_err());
        assert!(parse_labels(&["no-equals".into()]).is_err());
    }
}
