//! What an upgrade to another template does to a cluster's labels (pure).
//!
//! Magnum copies the template's labels into the cluster at create (merged
//! with the user's, or the user's alone): the row cannot say which value
//! came from where, except by comparing it with the template. The rule is
//! the vertical resize's (`plan::flavor_after_upgrade`): **a label whose
//! value is still the current template's follows the new template** (its
//! new value, a label the new template adds, or its removal); **a value the
//! cluster was given at create stays** (its own). `kube_tag` always follows
//! (the upgrade's point).
//!
//! A label that cannot change on a running cluster keeps its value even when
//! inherited ([`fixed`]): the networks, the API load balancer and its
//! address (the OpenStackCluster an upgrade does not re-apply: CAPO's
//! `OpenStackCluster` webhook refuses most of those changes anyway), the
//! server groups. What is kept is said at `UPDATE_COMPLETE` in the
//! cluster's `status_reason` ([`note`]), worked out from the row and its
//! template alone, so it survives restarts and needs no record of its own.
//!
//! The anchors, for comparison: vexxhost magnum-cluster-api's
//! `upgrade_cluster` moves `kube_tag` only (`driver.py`); magnum-capi-helm's
//! renders from the new template's labels under the cluster's
//! (`driver.py` `_label`: `mergeconcat(cluster_template.labels,
//! cluster.labels)`), so only labels the cluster lacks follow.

use serde_json::{Map, Value};

/// Why a label keeps its value on a running cluster, or None.
pub fn fixed(label: &str) -> Option<&'static str> {
    const NETWORK: &str = "the cluster's networks are made at create";
    const API: &str = "the API load balancer and its address are made at create";
    Some(match label {
        "fixed_subnet_cidr" => NETWORK,
        "calico_ipv4pool" | "cilium_ipv4pool" => {
            "the pod network cannot change on a running cluster"
        }
        "service_cluster_ip_range" => "Service addresses cannot change on a running cluster",
        "dns_cluster_domain" => "the cluster's DNS domain cannot change on a running cluster",
        "master_lb_floating_ip_enabled"
        | "api_server_floating_ip"
        | "octavia_provider"
        | "api_server_lb_flavor"
        | "api_server_lb_availability_zone"
        | "api_master_lb_allowed_cidrs" => API,
        "control_plane_availability_zones" => {
            "the control plane's failure domains are the OpenStackCluster's, made at create"
        }
        "server_group_policies" => "a Nova server group's policy cannot change",
        "capi_adopted_namespace" => "it names where an adopted cluster's objects live",
        _ => return None,
    })
}

/// Labels whose change is applied by the addons (HelmChartProxies and
/// ClusterResourceSets), besides the machines an upgrade rolls anyway.
pub const ADDON_LABELS: &[&str] = &[
    "metrics_server_enabled",
    "ingress_controller",
    "monitoring_enabled",
    "cilium_hubble_ui_enabled",
    "keystone_auth_enabled",
    "k8s_keystone_auth_tag",
    "manila_csi_enabled",
    "manila_csi_plugin_tag",
    "manila_csi_share_network_id",
    "octavia_lb_algorithm",
    "octavia_lb_healthcheck",
    "container_infra_prefix",
];

/// A label's value as text (Magnum's labels are strings; anything else as
/// JSON).
fn text(v: Option<&Value>) -> Option<String> {
    v.map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// One label the upgrade changes: `from` -> `to` (None: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    pub label: String,
    pub from: Option<String>,
    pub to: Option<String>,
}

/// One label the new template would change that the cluster keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub label: String,
    pub has: Option<String>,
    pub template: Option<String>,
    /// None: the cluster's own value; else why it cannot change.
    pub fixed: Option<&'static str>,
}

/// The labels after an upgrade, and what moved and what stayed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelUpgrade {
    pub labels: Map<String, Value>,
    pub followed: Vec<Followed>,
    pub kept: Vec<Kept>,
}

impl LabelUpgrade {
    /// Whether the addons must be rendered again.
    pub fn changes_addons(&self) -> bool {
        self.followed
            .iter()
            .any(|f| ADDON_LABELS.contains(&f.label.as_str()))
    }
}

/// Why an upgrade keeps every label of an adopted cluster: its objects are
/// its driver's design; only the version moves, as that driver did.
pub const ADOPTED: &str = "an adopted cluster keeps its labels (its driver's objects)";
/// ... and of an upgrade of the control plane alone: the labels are the
/// whole cluster's, and worker groups catching up one at a time keep their
/// machines as they are but for the version.
pub const CONTROL_PLANE_ONLY: &str = "an upgrade of the control plane alone keeps the cluster's labels (upgrade the whole cluster to apply them)";

/// The cluster's labels after an upgrade from `current` to `new` (template
/// labels), `kube_tag` aside (the caller sets the version it checked).
/// `keep_all`: why every label keeps its value ([`ADOPTED`],
/// [`CONTROL_PLANE_ONLY`]); what the new template changes is then only
/// reported.
pub fn after_upgrade(
    cluster: &Map<String, Value>,
    current: &Map<String, Value>,
    new: &Map<String, Value>,
    keep_all: Option<&'static str>,
) -> LabelUpgrade {
    let mut out = LabelUpgrade {
        labels: cluster.clone(),
        ..LabelUpgrade::default()
    };
    let mut names: Vec<&String> = current.keys().chain(new.keys()).collect();
    names.sort();
    names.dedup();
    for label in names {
        if label == "kube_tag" {
            continue;
        }
        let has = text(cluster.get(label));
        let was = text(current.get(label));
        let next = text(new.get(label));
        if next == was {
            continue; // the templates agree: nothing to follow
        }
        let inherited = has == was;
        let fixed = fixed(label).or(keep_all);
        if inherited && fixed.is_none() {
            match new.get(label) {
                Some(v) => out.labels.insert(label.clone(), v.clone()),
                None => out.labels.remove(label.as_str()),
            };
            out.followed.push(Followed {
                label: label.clone(),
                from: has,
                to: next,
            });
        } else if has != next {
            out.kept.push(Kept {
                label: label.clone(),
                has,
                template: next,
                fixed: if inherited { fixed } else { None },
            });
        }
    }
    out
}

fn shown(v: &Option<String>) -> String {
    match v {
        Some(s) => format!("{s:?}"),
        None => "(none)".into(),
    }
}

/// What a cluster's `status_reason` says at `UPDATE_COMPLETE` about labels
/// its template gives otherwise: each label the cluster keeps with another
/// value than `template`'s (its own, or one that cannot change on a running
/// cluster, with why), by label. Worked out from the row and its template
/// alone.
/// None: the cluster agrees with its template (or lacks only labels the
/// template has, which it chose at create without merging).
pub fn note(
    cluster: &Map<String, Value>,
    template: &Map<String, Value>,
    template_name: &str,
) -> Option<String> {
    let mut parts = Vec::new();
    let mut labels: Vec<(&String, &Value)> = template.iter().collect();
    labels.sort_by(|a, b| a.0.cmp(b.0));
    for (label, v) in labels {
        if label == "kube_tag" {
            continue;
        }
        let Some(has) = text(cluster.get(label)) else {
            continue;
        };
        let want = text(Some(v));
        if Some(&has) == want.as_ref() {
            continue;
        }
        let why = fixed(label)
            .map(|w| format!(", kept: {w}"))
            .unwrap_or_default();
        parts.push(format!("{label}={has:?} (template: {}{why})", shown(&want)));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "labels not as template {template_name} gives them: {}",
            parts.join("; ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn inherited_labels_follow_the_template_and_own_values_stay() {
        let current = map(json!({
            "kube_tag": "v1.30.4", "boot_volume_size": "20", "metrics_server_enabled": "false",
            "audit_log_enabled": "false", "octavia_lb_algorithm": "ROUND_ROBIN",
            "calico_ipv4pool": "10.100.0.0/16", "min_node_count": "1",
        }));
        let new = map(json!({
            "kube_tag": "v1.31.2", "boot_volume_size": "40", "metrics_server_enabled": "true",
            "audit_log_enabled": "true", "calico_ipv4pool": "10.200.0.0/16",
            "ingress_controller": "nginx", "min_node_count": "1",
        }));
        // The user gave boot_volume_size at create and an extra label.
        let cluster = map(json!({
            "kube_tag": "v1.30.4", "boot_volume_size": "50", "metrics_server_enabled": "false",
            "audit_log_enabled": "false", "octavia_lb_algorithm": "ROUND_ROBIN",
            "calico_ipv4pool": "10.100.0.0/16", "min_node_count": "1", "mine": "x",
        }));
        let u = after_upgrade(&cluster, &current, &new, None);
        assert_eq!(
            Value::Object(u.labels.clone()),
            json!({
                "kube_tag": "v1.30.4", "boot_volume_size": "50", "metrics_server_enabled": "true",
                "audit_log_enabled": "true", "calico_ipv4pool": "10.100.0.0/16",
                "ingress_controller": "nginx", "min_node_count": "1", "mine": "x",
            }),
            "octavia_lb_algorithm left with the template that had it"
        );
        let followed: Vec<_> = u.followed.iter().map(|f| f.label.as_str()).collect();
        assert_eq!(
            followed,
            [
                "audit_log_enabled",
                "ingress_controller",
                "metrics_server_enabled",
                "octavia_lb_algorithm"
            ]
        );
        assert_eq!(
            u.followed[3],
            Followed {
                label: "octavia_lb_algorithm".into(),
                from: Some("ROUND_ROBIN".into()),
                to: None
            }
        );
        assert_eq!(
            u.kept,
            [
                Kept {
                    label: "boot_volume_size".into(),
                    has: Some("50".into()),
                    template: Some("40".into()),
                    fixed: None
                },
                Kept {
                    label: "calico_ipv4pool".into(),
                    has: Some("10.100.0.0/16".into()),
                    template: Some("10.200.0.0/16".into()),
                    fixed: fixed("calico_ipv4pool")
                },
            ]
        );
        assert!(u.changes_addons());
    }

    #[test]
    fn a_cluster_made_without_a_template_label_keeps_without_it() {
        // Labels given without merging: the cluster has no audit_log_enabled.
        let current = map(json!({"kube_tag": "v1.30.4", "audit_log_enabled": "false"}));
        let new = map(json!({"kube_tag": "v1.31.2", "audit_log_enabled": "true"}));
        let cluster = map(json!({"kube_tag": "v1.30.4"}));
        let u = after_upgrade(&cluster, &current, &new, None);
        assert_eq!(
            Value::Object(u.labels.clone()),
            json!({"kube_tag": "v1.30.4"})
        );
        assert!(u.followed.is_empty());
        assert_eq!(u.kept[0].label, "audit_log_enabled");
        assert!(!u.changes_addons());
    }

    #[test]
    fn templates_that_agree_change_nothing_and_adopted_clusters_keep_all() {
        let t = map(json!({"kube_tag": "v1.30.4", "monitoring_enabled": "true"}));
        let cluster = map(json!({"kube_tag": "v1.30.4", "monitoring_enabled": "false"}));
        let same = after_upgrade(&cluster, &t, &t, None);
        assert_eq!(same.labels, cluster);
        assert!(same.followed.is_empty() && same.kept.is_empty());
        let new = map(
            json!({"kube_tag": "v1.31.2", "monitoring_enabled": "true", "metrics_server_enabled": "true"}),
        );
        let a = after_upgrade(&t, &t, &new, Some(ADOPTED));
        assert_eq!(a.labels, t);
        assert_eq!(a.kept.len(), 1);
        assert_eq!(a.kept[0].fixed, Some(ADOPTED));
    }

    #[test]
    fn the_lists_name_labels_the_conductor_reads() {
        use crate::capi::labels::SUPPORTED;
        for l in ADDON_LABELS {
            assert!(SUPPORTED.contains(l), "{l}");
        }
        let fixed_ones: Vec<&str> = SUPPORTED
            .iter()
            .copied()
            .filter(|l| fixed(l).is_some())
            .collect();
        // Every label `fixed` names (14) is one the conductor reads.
        assert_eq!(fixed_ones.len(), 14, "{fixed_ones:?}");
        assert!(fixed("kube_tag").is_none() && fixed("audit_log_enabled").is_none());
    }

    #[test]
    fn the_note_names_what_differs_from_the_template_and_why() {
        let t = map(json!({
            "kube_tag": "v1.31.2", "boot_volume_size": "40", "calico_ipv4pool": "10.200.0.0/16",
            "audit_log_enabled": "true",
        }));
        let cluster = map(json!({
            "kube_tag": "v1.31.2", "boot_volume_size": "50", "calico_ipv4pool": "10.100.0.0/16",
            "audit_log_enabled": "true", "mine": "x",
        }));
        assert_eq!(
            note(&cluster, &t, "k8s-v1.31").as_deref(),
            Some(
                "labels not as template k8s-v1.31 gives them: boot_volume_size=\"50\" (template: \"40\"); \
                 calico_ipv4pool=\"10.100.0.0/16\" (template: \"10.200.0.0/16\", kept: the pod network \
                 cannot change on a running cluster)"
            )
        );
        assert_eq!(note(&t, &t, "k8s-v1.31"), None);
        // A label the cluster lacks (given without merging) is not news.
        assert_eq!(note(&map(json!({"kube_tag": "v1.30.4"})), &t, "x"), None);
    }
}
