//! The rows `cluster_create` inserts, and the rows -> rendering input
//! (pure). Follows Magnum's `cluster_conductor.cluster_create` and
//! `conductor.utils._get_nodegroup_object` field by field.

use std::collections::BTreeMap;

use rpc_schema::ovo::{self, MagnumObject};
use serde_json::{Value, json};

use crate::capi::labels;
use crate::capi::naming;
use crate::capi::render::{self, CapiLine, ClusterInput, Rollout, WorkerGroup};
use crate::capi::topology;

pub const CREATE_IN_PROGRESS: &str = "CREATE_IN_PROGRESS";

/// The cluster label `adopt` gives a cluster run by a ClusterClass
/// topology (vexxhost magnum-cluster-api): the namespace its CAPI Cluster
/// lives in. It is what makes every conductor treat the cluster as a
/// topology (no object rendered, `capi::topology`), from the row alone,
/// with or without a warm watch cache. Only `adopt` writes it: a create
/// that carries it is refused (see `operations::create`), and Magnum
/// never changes a cluster's labels afterwards.
pub const ADOPTED_NAMESPACE_LABEL: &str = "capi_adopted_namespace";

/// The namespace of a topology cluster `adopt` took over, from its row
/// (only vexxhost's namespace is honoured: the label cannot point a
/// cluster into another project's namespace).
pub fn adopted_namespace(cluster: &MagnumObject) -> Option<&'static str> {
    let v = cluster
        .get("labels")
        .and_then(|l| l.get(ADOPTED_NAMESPACE_LABEL))
        .and_then(Value::as_str)?;
    (v == topology::VEXXHOST_NAMESPACE).then_some(topology::VEXXHOST_NAMESPACE)
}

/// The namespace a cluster's objects are in.
pub fn namespace(namespace_prefix: &str, cluster: &MagnumObject) -> String {
    match adopted_namespace(cluster) {
        Some(ns) => ns.to_string(),
        None => naming::namespace(
            namespace_prefix,
            cluster.get_str("project_id").unwrap_or_default(),
        ),
    }
}

fn set(o: &mut MagnumObject, field: &str, v: Value) -> Result<(), String> {
    o.set(field, v).map_err(|e| e.to_string())
}

/// The cluster as the conductor inserts it: the API's fields, status
/// CREATE_IN_PROGRESS, status_reason None (step 1 of Magnum's create).
pub fn new_cluster_row(cast: &MagnumObject) -> Result<MagnumObject, String> {
    let mut c = cast.clone();
    set(&mut c, "status", json!(CREATE_IN_PROGRESS))?;
    set(&mut c, "status_reason", Value::Null)?;
    Ok(c)
}

/// Python truthiness of an optional scalar (`a or b`).
fn or<'a>(a: Option<&'a Value>, b: Option<&'a Value>) -> Value {
    let truthy = |v: &&Value| match v {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Bool(b) => *b,
        _ => true,
    };
    a.filter(truthy).or(b).cloned().unwrap_or(Value::Null)
}

/// `_get_nodegroup_object(context, cluster, node_count, is_master)`: the
/// `default-master` / `default-worker` row. `uuid` is the new row's uuid.
/// Errors as Magnum's would (`int(labels["min_node_count"])`).
pub fn default_nodegroup(
    cluster: &MagnumObject,
    template: &MagnumObject,
    node_count: i64,
    master: bool,
    uuid: &str,
) -> Result<MagnumObject, String> {
    let mut ng = MagnumObject::new(&ovo::NODE_GROUP);
    set(&mut ng, "uuid", json!(uuid))?;
    set(&mut ng, "cluster_id", json!(cluster.get_str("uuid")))?;
    set(&mut ng, "project_id", json!(cluster.get_str("project_id")))?;
    let labels = cluster
        .get("labels")
        .filter(|l| l.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    set(&mut ng, "labels", labels)?;
    set(&mut ng, "node_count", json!(node_count))?;
    set(
        &mut ng,
        "image_id",
        template.get("image_id").cloned().unwrap_or(Value::Null),
    )?;
    set(
        &mut ng,
        "docker_volume_size",
        or(
            cluster.get("docker_volume_size"),
            template.get("docker_volume_size"),
        ),
    )?;
    if master {
        set(
            &mut ng,
            "flavor_id",
            or(
                cluster.get("master_flavor_id"),
                template.get("master_flavor_id"),
            ),
        )?;
        set(&mut ng, "role", json!("master"))?;
    } else {
        set(
            &mut ng,
            "flavor_id",
            or(cluster.get("flavor_id"), template.get("flavor_id")),
        )?;
        set(&mut ng, "role", json!("worker"))?;
        if let Some(v) = cluster.get("labels").and_then(|l| l.get("min_node_count")) {
            let s = v.as_str().unwrap_or_default();
            let n: i64 = s.trim().parse().map_err(|_| {
                format!("invalid literal for int() with base 10: '{s}' (label min_node_count)")
            })?;
            set(&mut ng, "min_node_count", json!(n))?;
        }
    }
    set(
        &mut ng,
        "name",
        json!(if master {
            "default-master"
        } else {
            "default-worker"
        }),
    )?;
    set(&mut ng, "is_default", json!(true))?;
    set(&mut ng, "status", json!(CREATE_IN_PROGRESS))?;
    Ok(ng)
}

/// A row's string map (`labels`), each value as Magnum's own string.
pub(in crate::lifecycle) fn dict(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let s = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), s)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn opt(o: &MagnumObject, field: &str) -> Option<String> {
    o.get_str(field)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// Warnings about labels that are ignored (logged once, at create).
pub fn label_warnings(cluster: &MagnumObject, template: &MagnumObject) -> Vec<String> {
    let driver = opt(template, "network_driver").unwrap_or_else(|| "calico".into());
    labels::parse(&dict(cluster.get("labels")), &driver)
        .map(|(_, w)| w)
        .unwrap_or_default()
}

/// What a complete cluster's `status_reason` says about its labels: those
/// ignored (unknown, or with no meaning here), so the user sees them, not
/// only the conductor's log; after an update (`updated`), also the labels
/// it keeps with another value than its template's (an upgrade's labels:
/// [`crate::capi::label_upgrade::note`]). None when there is nothing to say.
pub fn label_note(
    cluster: &MagnumObject,
    template: &MagnumObject,
    updated: bool,
) -> Option<String> {
    let mut w = label_warnings(cluster, template);
    if updated
        && let (Some(c), Some(t)) = (
            cluster.get("labels").and_then(Value::as_object),
            template.get("labels").and_then(Value::as_object),
        )
        && let Some(n) =
            crate::capi::label_upgrade::note(c, t, template.get_str("name").unwrap_or_default())
    {
        w.push(n);
    }
    (!w.is_empty()).then(|| format!("complete; {}", w.join("; ")))
}

/// The labels no list of [`labels`] names (`[capi] unknown_labels =
/// error` refuses a create that has any).
pub fn unknown_labels(cluster: &MagnumObject) -> Vec<String> {
    dict(cluster.get("labels"))
        .into_keys()
        .filter(|k| {
            crate::capi::label_table::treatment(k) == crate::capi::label_table::Treatment::Unknown
        })
        .collect()
}

/// The create's refusal of `unknown` labels under `[capi] unknown_labels`
/// (`warn`: none).
pub fn unknown_label_refusal(mode: &str, unknown: &[String]) -> Option<String> {
    (mode == "error" && !unknown.is_empty()).then(|| {
        format!(
            "label(s) {} not known to this conductor ([capi] unknown_labels = error); \
             docs/labels.md lists the labels it reads",
            unknown.join(", ")
        )
    })
}

/// Distributions whose images boot with Ignition: kubeadm bootstrap data
/// for them needs `format: ignition`, which this conductor does not render.
pub const IGNITION_DISTROS: &[&str] = &["flatcar", "fedora-coreos", "coreos"];

/// The `[capi] os_distros` this conductor really serves: the configured
/// ones minus Ignition distributions (returned second, to warn about).
pub fn served_distros(configured: &[String]) -> (Vec<String>, Vec<String>) {
    configured
        .iter()
        .cloned()
        .partition(|d| !IGNITION_DISTROS.contains(&d.as_str()))
}

/// Why this conductor cannot build the template's cluster type, as
/// Magnum's `ClusterTypeNotSupported` words it (the driver lookup Magnum's
/// conductor makes before `create_cluster`); None when it can.
pub fn cluster_type_refusal(template: &MagnumObject, served: &[String]) -> Option<String> {
    let server_type = opt(template, "server_type");
    let distro = opt(template, "cluster_distro");
    let coe = opt(template, "coe");
    let ok = server_type.as_deref() == Some("vm")
        && coe.as_deref() == Some("kubernetes")
        && distro.as_ref().is_some_and(|d| served.contains(d));
    if ok {
        return None;
    }
    let none = || "None".to_string();
    let supported = served
        .iter()
        .map(|d| format!("(vm, {d}, kubernetes)"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut msg = format!(
        "Cluster type ({}, {}, {}) is not supported by any loaded cluster driver. \
         Loaded drivers support: {}.",
        server_type.unwrap_or_else(none),
        distro.clone().unwrap_or_else(none),
        coe.unwrap_or_else(none),
        if supported.is_empty() {
            "none".to_string()
        } else {
            supported
        }
    );
    if let Some(d) = distro.filter(|d| IGNITION_DISTROS.contains(&d.as_str())) {
        msg.push_str(&format!(
            " {d} images boot with Ignition; this conductor bootstraps nodes with cloud-init."
        ));
    }
    Some(msg)
}

/// Nodegroup statuses of a group that is going away (not rendered).
pub fn is_deleting(ng: &MagnumObject) -> bool {
    ng.get_str("status")
        .is_some_and(|s| s.starts_with("DELETE_"))
}

/// The group key of a nodegroup row (see [`naming::group_key`]).
pub fn group_key(ng: &MagnumObject) -> String {
    naming::group_key(
        ng.get_str("name").unwrap_or_default(),
        ng.get_str("uuid").unwrap_or_default(),
    )
}

/// The Kubernetes version a nodegroup row asks for: its `version` (set by
/// upgrades), else the `kube_tag` its labels were created with, else the
/// cluster's.
pub fn group_version(ng: &MagnumObject, cluster_version: &str) -> Result<String, String> {
    if let Some(v) = opt(ng, "version") {
        return labels::kube_version(&v).map_err(|e| {
            format!(
                "nodegroup {} version: {e}",
                ng.get_str("name").unwrap_or("?")
            )
        });
    }
    let from_labels = ng
        .get("labels")
        .and_then(|l| l.get("kube_tag"))
        .and_then(Value::as_str)
        .and_then(|t| labels::kube_version(t).ok());
    Ok(from_labels.unwrap_or_else(|| cluster_version.to_string()))
}

/// The autoscaler bounds of a worker group, or None when it is not
/// autoscaled (autoscaling off, no `max_node_count`, or min == max, as
/// magnum-capi-helm). The default worker falls back to the cluster's
/// `min_node_count` / `max_node_count` labels.
pub fn autoscale_bounds(
    cluster_labels: &labels::Labels,
    ng: &MagnumObject,
) -> Result<Option<(u32, u32)>, String> {
    if !cluster_labels.auto_scaling {
        return Ok(None);
    }
    let name = ng.get_str("name").unwrap_or("?");
    let default = ng.get_bool("is_default") == Some(true);
    let col = |f: &str| ng.get_i64(f).map(|n| u32::try_from(n).unwrap_or(0));
    let max = col("max_node_count").or(if default {
        cluster_labels.max_node_count
    } else {
        None
    });
    let Some(max) = max else { return Ok(None) };
    let min = col("min_node_count")
        .or(if default {
            cluster_labels.min_node_count
        } else {
            None
        })
        .unwrap_or(1);
    if min < 1 {
        return Err(format!(
            "nodegroup {name}: min_node_count must be at least 1 with auto_scaling_enabled \
             (scaling from zero is not supported: CAPO reports no machine capacity)"
        ));
    }
    if max < min {
        return Err(format!(
            "nodegroup {name}: max_node_count {max} is below min_node_count {min}"
        ));
    }
    Ok((max > min).then_some((min, max)))
}

/// Rendering input from the rows. Errors are the `status_reason` of a
/// failed operation: they name the field or label that cannot be honoured.
/// Nodegroups being deleted are left out.
/// Whether the cluster's API gets a floating IP (pure), as Magnum's
/// labels document it: with an API load balancer (`master_lb_enabled`),
/// the label `master_lb_floating_ip_enabled`, which defaults to the
/// cluster's `floating_ip_enabled` (`--floating-ip-disabled`); without
/// one the label does not apply and the API is a control-plane machine,
/// whose floating IP `floating_ip_enabled` decides. CAPO has no endpoint
/// for a cluster with neither a load balancer nor a floating IP
/// (`reconcileControlPlaneEndpoint`: "unable to determine control plane
/// endpoint"): refused here rather than stuck there.
pub fn api_floating_ip(
    master_lb_enabled: bool,
    floating_ip_enabled: bool,
    label: Option<bool>,
) -> Result<bool, String> {
    if master_lb_enabled {
        return Ok(label.unwrap_or(floating_ip_enabled));
    }
    if !floating_ip_enabled {
        return Err(
            "a cluster without an API load balancer (master_lb_enabled false) needs a \
                    floating IP for its API: create it with --master-lb-enabled (its API then \
                    follows the label master_lb_floating_ip_enabled, reached through \
                    magnum-capi-proxy when false) or without --floating-ip-disabled"
                .into(),
        );
    }
    Ok(true)
}

pub fn cluster_input(
    line: CapiLine,
    namespace_prefix: &str,
    cluster: &MagnumObject,
    template: &MagnumObject,
    nodegroups: &[MagnumObject],
) -> Result<(ClusterInput, String), String> {
    let uuid = opt(cluster, "uuid").ok_or("cluster without uuid")?;
    let project_id = opt(cluster, "project_id").ok_or("cluster without project_id")?;
    let stack_id = opt(cluster, "stack_id").ok_or("cluster without stack_id")?;
    let network_driver = opt(template, "network_driver").unwrap_or_else(|| "calico".into());
    if network_driver != "calico" && network_driver != "cilium" {
        // magnum-api fills an unset network driver from
        // [cluster_template] kubernetes_default_network_driver (flannel).
        let fix = if network_driver == "flannel" {
            "; magnum-api's default is flannel: create the template with --network-driver \
             calico, or set [cluster_template] kubernetes_default_network_driver = calico \
             in magnum-api's magnum.conf"
        } else {
            ""
        };
        return Err(format!(
            "network_driver {network_driver:?} is not supported (supported: calico, cilium){fix}"
        ));
    }
    let topology_run = adopted_namespace(cluster).is_some();
    let mut label_map = dict(cluster.get("labels"));
    if topology_run {
        // Its ClusterClass provides what they ask for; nothing is rendered.
        label_map = labels::without_refused(label_map);
    }
    let (mut labels, warnings) =
        labels::parse(&label_map, &network_driver).map_err(|e| e.to_string())?;
    for w in warnings {
        tracing::debug!(cluster = %uuid, "{w}");
    }
    labels.api_lb_floating_ip = api_floating_ip(
        cluster.get_bool("master_lb_enabled").unwrap_or(false),
        cluster.get_bool("floating_ip_enabled").unwrap_or(true),
        label_map
            .contains_key("master_lb_floating_ip_enabled")
            .then_some(labels.api_lb_floating_ip),
    )?;
    if let Some(fip) = labels.infra.api_floating_ip
        && !labels.api_lb_floating_ip
    {
        return Err(format!(
            "label api_server_floating_ip={fip} asks for a floating IP on the API, which this \
             cluster has none of (floating_ip_enabled false, or master_lb_floating_ip_enabled false)"
        ));
    }
    let master = nodegroups
        .iter()
        .find(|n| n.get_str("role") == Some("master") && n.get_bool("is_default") == Some(true))
        .ok_or("cluster without a default-master nodegroup")?;
    let image = |ng: &MagnumObject| {
        opt(ng, "image_id")
            .or_else(|| opt(template, "image_id"))
            .ok_or_else(|| {
                format!(
                    "nodegroup {} has no image",
                    ng.get_str("name").unwrap_or("?")
                )
            })
    };
    let flavor = |ng: &MagnumObject| {
        opt(ng, "flavor_id").ok_or_else(|| {
            format!(
                "nodegroup {} has no flavor",
                ng.get_str("name").unwrap_or("?")
            )
        })
    };
    // `docker_volume_size` (GiB) of a nodegroup; 0 or NULL: none.
    let docker = |ng: &MagnumObject| {
        ng.get_i64("docker_volume_size")
            .filter(|n| *n > 0)
            .and_then(|n| u32::try_from(n).ok())
    };
    let count = |ng: &MagnumObject| -> Result<u32, String> {
        u32::try_from(ng.get_i64("node_count").unwrap_or(0)).map_err(|_| {
            format!(
                "nodegroup {} has a negative node_count",
                ng.get_str("name").unwrap_or("?")
            )
        })
    };
    let master_count = count(master)?;
    if master_count == 0 || master_count % 2 == 0 {
        return Err(format!(
            "master_count {master_count} is not supported: the control plane needs an odd number of nodes"
        ));
    }
    let master_version = group_version(master, &labels.kube_version)?;
    let mut workers = Vec::new();
    for ng in nodegroups
        .iter()
        .filter(|n| n.get_str("role") != Some("master") && !is_deleting(n))
    {
        let taints = ng
            .get("node_taints")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| {
                        (
                            t["key"].as_str().unwrap_or_default().to_string(),
                            t["value"].as_str().map(str::to_string),
                            t["effect"].as_str().unwrap_or_default().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let autoscale = autoscale_bounds(&labels, ng)?;
        let mut n = count(ng)?;
        if let Some((lo, hi)) = autoscale {
            n = n.clamp(lo, hi);
        }
        workers.push(WorkerGroup {
            name: ng.get_str("name").unwrap_or("default-worker").to_string(),
            key: group_key(ng),
            flavor: flavor(ng)?,
            image: image(ng)?,
            version: group_version(ng, &labels.kube_version)?,
            count: n,
            autoscale,
            set_replicas: true,
            docker_volume_gb: docker(ng),
            node_labels: dict(ng.get("node_labels")),
            node_taints: taints,
            rollout: Rollout::default(),
            held_template: None,
            adopted_labels: None,
        });
    }
    let dns = opt(template, "dns_nameserver")
        .map(|s| {
            s.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let input = ClusterInput {
        line,
        namespace: namespace(namespace_prefix, cluster),
        stack_id,
        cluster_uuid: uuid,
        project_id,
        labels,
        master_version,
        master_image: image(master)?,
        master_flavor: flavor(master)?,
        master_count,
        master_docker_volume_gb: docker(master),
        keypair: opt(cluster, "keypair").or_else(|| opt(template, "keypair_id")),
        external_network_id: opt(template, "external_network_id"),
        fixed_network: opt(cluster, "fixed_network").or_else(|| opt(template, "fixed_network")),
        fixed_subnet: opt(cluster, "fixed_subnet").or_else(|| opt(template, "fixed_subnet")),
        dns_nameservers: dns,
        master_lb_enabled: cluster.get_bool("master_lb_enabled").unwrap_or(false),
        // Set from `[capi] api_proxy` by the engine.
        api_proxy: false,
        workers,
        adopted: topology_run.then(|| render::Adopted {
            topology: true,
            ..render::Adopted::default()
        }),
    };
    Ok((input, network_driver))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_labels_are_refused_only_when_the_operator_says_so() {
        let c = obj(
            &ovo::CLUSTER,
            json!({"labels": {"kube_tag": "v1.30.4", "npd_enabled": "true", "frobnicate": "1"}}),
        );
        // Known-ignored (Heat-era) labels are not unknown.
        assert_eq!(unknown_labels(&c), ["frobnicate"]);
        assert_eq!(unknown_label_refusal("warn", &unknown_labels(&c)), None);
        let r = unknown_label_refusal("error", &unknown_labels(&c)).unwrap();
        assert!(r.starts_with("label(s) frobnicate not known"), "{r}");
        assert_eq!(unknown_label_refusal("error", &[]), None);
    }

    #[test]
    fn the_apis_floating_ip_follows_magnums_labels() {
        // With a load balancer: the label, else floating_ip_enabled.
        assert_eq!(api_floating_ip(true, true, None), Ok(true));
        assert_eq!(api_floating_ip(true, false, None), Ok(false));
        assert_eq!(api_floating_ip(true, false, Some(true)), Ok(true));
        assert_eq!(api_floating_ip(true, true, Some(false)), Ok(false));
        // Without one: the label does not apply; no floating IP at all is
        // refused with what to do.
        assert_eq!(api_floating_ip(false, true, Some(false)), Ok(true));
        let e = api_floating_ip(false, false, None).unwrap_err();
        assert!(
            e.contains("--master-lb-enabled") && e.contains("floating-ip-disabled"),
            "{e}"
        );
    }

    fn obj(class: &'static ovo::ClassSpec, v: Value) -> MagnumObject {
        let mut o = MagnumObject::new(class);
        for (k, v) in v.as_object().unwrap() {
            o.set(k, v.clone()).unwrap();
        }
        o
    }

    fn template() -> MagnumObject {
        obj(
            &ovo::CLUSTER_TEMPLATE,
            json!({"uuid": "t-1", "image_id": "img", "flavor_id": "m1.small", "master_flavor_id": "m1.medium",
                   "docker_volume_size": 20, "network_driver": "calico", "external_network_id": "public",
                   "dns_nameserver": "8.8.8.8", "keypair_id": "tkey"}),
        )
    }

    #[test]
    fn cluster_types_served() {
        let served = served_distros(&["ubuntu".into(), "flatcar".into(), "rockylinux".into()]);
        assert_eq!(served.0, ["ubuntu", "rockylinux"]);
        assert_eq!(served.1, ["flatcar"]);
        let with = |st: Value, d: Value, coe: Value| {
            obj(
                &ovo::CLUSTER_TEMPLATE,
                json!({"server_type": st, "cluster_distro": d, "coe": coe}),
            )
        };
        let k = json!("kubernetes");
        assert_eq!(
            cluster_type_refusal(&with(json!("vm"), json!("ubuntu"), k.clone()), &served.0),
            None
        );
        let e = cluster_type_refusal(&with(json!("vm"), json!("flatcar"), k.clone()), &served.0)
            .unwrap();
        assert_eq!(
            e,
            "Cluster type (vm, flatcar, kubernetes) is not supported by any loaded cluster driver. \
             Loaded drivers support: (vm, ubuntu, kubernetes), (vm, rockylinux, kubernetes). \
             flatcar images boot with Ignition; this conductor bootstraps nodes with cloud-init."
        );
        let e = cluster_type_refusal(&with(Value::Null, Value::Null, k.clone()), &[]).unwrap();
        assert!(
            e.starts_with("Cluster type (None, None, kubernetes)") && e.ends_with("support: none."),
            "{e}"
        );
        assert!(cluster_type_refusal(&with(json!("bm"), json!("ubuntu"), k), &served.0).is_some());
        assert!(
            cluster_type_refusal(&with(json!("vm"), json!("ubuntu"), Value::Null), &served.0)
                .is_some()
        );
    }

    fn cluster(labels: Value) -> MagnumObject {
        obj(
            &ovo::CLUSTER,
            json!({"uuid": "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", "name": "k8s", "project_id": "p1", "user_id": "u1",
                   "cluster_template_id": "t-1", "labels": labels, "docker_volume_size": 0,
                   "master_flavor_id": null, "flavor_id": "m1.large", "master_lb_enabled": true,
                   "status": "CREATE_FAILED", "status_reason": "old"}),
        )
    }

    #[test]
    fn rows_follow_magnum() {
        let c = new_cluster_row(&cluster(json!({"kube_tag": "v1.30.4"}))).unwrap();
        assert_eq!(c.get_str("status"), Some(CREATE_IN_PROGRESS));
        assert_eq!(c.get("status_reason"), Some(&Value::Null));
        let t = template();
        let m = default_nodegroup(&c, &t, 3, true, "m-uuid").unwrap();
        assert_eq!(m.get_str("name"), Some("default-master"));
        assert_eq!(m.get_str("role"), Some("master"));
        assert_eq!(
            m.get_str("flavor_id"),
            Some("m1.medium"),
            "template's, cluster's is None"
        );
        assert_eq!(
            m.get_i64("docker_volume_size"),
            Some(20),
            "0 is falsy: template's"
        );
        assert_eq!(m.get_i64("node_count"), Some(3));
        assert_eq!(m.get_bool("is_default"), Some(true));
        assert!(!m.is_set("min_node_count") && !m.is_set("stack_id"));
        assert_eq!(m.get("labels"), Some(&json!({"kube_tag": "v1.30.4"})));
        let w = default_nodegroup(&c, &t, 2, false, "w-uuid").unwrap();
        assert_eq!(w.get_str("flavor_id"), Some("m1.large"));
        assert_eq!(w.get_str("cluster_id"), c.get_str("uuid"));
        assert!(!w.is_set("min_node_count"));
        let c2 = cluster(json!({"min_node_count": "1"}));
        let w = default_nodegroup(&c2, &t, 2, false, "w").unwrap();
        assert_eq!(w.get_i64("min_node_count"), Some(1));
        let bad = cluster(json!({"min_node_count": "x"}));
        assert!(default_nodegroup(&bad, &t, 2, false, "w").is_err());
        assert!(
            default_nodegroup(&bad, &t, 2, true, "m").is_ok(),
            "only the worker reads it"
        );
    }

    #[test]
    fn input_from_rows_and_reasons() {
        let mut c = new_cluster_row(&cluster(json!({"kube_tag": "v1.30.4"}))).unwrap();
        c.set("stack_id", json!("k8s-abcdefghijkl")).unwrap();
        let t = template();
        let ngs = vec![
            default_nodegroup(&c, &t, 3, true, "m").unwrap(),
            default_nodegroup(&c, &t, 2, false, "w").unwrap(),
        ];
        let (i, nd) = cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &ngs).unwrap();
        assert_eq!(nd, "calico");
        assert_eq!(i.namespace, "magnum-p1");
        assert_eq!((i.master_count, i.master_flavor.as_str()), (3, "m1.medium"));
        assert_eq!(i.workers.len(), 1);
        assert_eq!(i.workers[0].flavor, "m1.large");
        assert_eq!(i.keypair.as_deref(), Some("tkey"));
        assert_eq!(i.dns_nameservers, ["8.8.8.8"]);
        assert!(i.master_lb_enabled);

        let no_tag = new_cluster_row(&cluster(json!({}))).unwrap();
        let mut no_tag = no_tag;
        no_tag.set("stack_id", json!("s")).unwrap();
        let e = cluster_input(CapiLine::V1beta1, "magnum-", &no_tag, &t, &ngs).unwrap_err();
        assert!(e.contains("kube_tag"), "{e}");
        let mut flannel = t.clone();
        flannel.set("network_driver", json!("flannel")).unwrap();
        let e = cluster_input(CapiLine::V1beta1, "magnum-", &c, &flannel, &ngs).unwrap_err();
        assert!(e.contains("flannel"), "{e}");
        // magnum-api's default: the fix is named.
        assert!(
            e.contains("kubernetes_default_network_driver = calico"),
            "{e}"
        );
        let even = vec![
            default_nodegroup(&c, &t, 2, true, "m").unwrap(),
            default_nodegroup(&c, &t, 2, false, "w").unwrap(),
        ];
        let e = cluster_input(CapiLine::V1beta1, "magnum-", &c, &t, &even).unwrap_err();
        assert!(e.contains("odd"), "{e}");
    }
}
