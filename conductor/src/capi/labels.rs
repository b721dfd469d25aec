//! Magnum cluster labels, as this conductor understands them (pure).
//!
//! Every label is one of:
//! - **supported**: parsed and validated here, used by the CAPI rendering;
//! - **refused when it asks for something we do not do** (`keystone_auth_enabled=true`,
//!   a dedicated etcd volume...): the create fails with a
//!   reason naming the label, instead of a cluster that silently lacks the feature;
//! - **Heat-era knobs** with no meaning on Cluster API: ignored, reported as a warning;
//! - anything else: unknown, ignored, reported as a warning.
//!
//! Defaults follow the two existing CAPI drivers where they agree
//! (capi-drivers-survey.md §2.2).

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The parsed labels.
#[derive(Debug, Clone, PartialEq)]
pub struct Labels {
    /// `kube_tag`, e.g. `v1.30.4` (required).
    pub kube_version: String,
    /// `auto_scaling_enabled` (default false): the cluster autoscaler owns
    /// the replicas of worker groups that have bounds.
    pub auto_scaling: bool,
    pub boot_volume_size_gb: Option<u32>,
    pub boot_volume_type: Option<String>,
    /// Volume type of the container-storage volume (`docker_volume_size`).
    pub docker_volume_type: Option<String>,
    pub availability_zone: Option<String>,
    /// `auto_healing_enabled` (default true): MachineHealthChecks.
    pub auto_healing: bool,
    /// `fixed_subnet_cidr` (default 10.0.0.0/24), used when we create the network.
    pub node_cidr: String,
    /// `calico_ipv4pool` / `cilium_ipv4pool` (default 10.100.0.0/16).
    pub pod_cidr: String,
    /// `service_cluster_ip_range` (default 10.254.0.0/16).
    pub service_cidr: String,
    /// `dns_cluster_domain` (default cluster.local).
    pub dns_domain: String,
    /// `master_lb_floating_ip_enabled` (default true).
    pub api_lb_floating_ip: bool,
    /// `api_master_lb_allowed_cidrs` (comma list) -> CAPO `allowedCIDRs`.
    pub api_allowed_cidrs: Vec<String>,
    /// `octavia_provider` (default amphora).
    pub octavia_provider: String,
    /// `container_infra_prefix`: registry mirror for system images.
    pub container_infra_prefix: Option<String>,
    pub min_node_count: Option<u32>,
    pub max_node_count: Option<u32>,
}

/// Why a label set cannot be used (the create fails with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("label {0} is required")]
    Missing(&'static str),
    #[error("label {label}={value:?} is invalid: {reason}")]
    Invalid {
        label: String,
        value: String,
        reason: String,
    },
    #[error("label {label}={value:?} asks for {feature}, which this conductor does not provide")]
    Unsupported {
        label: String,
        value: String,
        feature: &'static str,
    },
}

/// Labels that request a feature we do not implement, when set to a value
/// that turns it on: (label, feature, is the value a request?).
const REFUSED: &[(&str, &str)] = &[
    ("keystone_auth_enabled", "the k8s-keystone-auth webhook"),
    ("monitoring_enabled", "a monitoring stack"),
    ("manila_csi_enabled", "the Manila CSI driver"),
    ("audit_log_enabled", "API audit logging"),
    ("kube_dashboard_enabled", "the Kubernetes dashboard"),
];

/// Labels whose non-empty value we cannot honour.
const REFUSED_VALUES: &[(&str, &str)] = &[
    ("ingress_controller", "an ingress controller"),
    ("etcd_volume_size", "a dedicated etcd volume"),
    ("etcd_blockdevice_size", "a dedicated etcd block device"),
    ("extra_network_names", "extra node networks"),
    ("oidc_issuer_url", "API server OIDC"),
    ("api_server_floating_ip", "a pre-existing API floating IP"),
    (
        "control_plane_availability_zones",
        "per-AZ control plane placement",
    ),
];

/// Heat-era and driver-specific labels with no meaning here (ignored, warned).
const IGNORED: &[&str] = &[
    "heat_container_agent_tag",
    "cgroup_driver",
    "container_runtime",
    "selinux_mode",
    "npd_enabled",
    "cert_manager_api",
    "influx_grafana_dashboard_enabled",
    "tiller_enabled",
    "tiller_tag",
    "tiller_namespace",
    "helm_client_url",
    "helm_client_sha256",
    "helm_client_tag",
    "flannel_tag",
    "flannel_cni_tag",
    "flannel_network_cidr",
    "flannel_network_subnetlen",
    "flannel_backend",
    "kube_dashboard_version",
    "metrics_server_enabled",
    "metrics_server_chart_tag",
    "prometheus_monitoring",
    "auto_healing_controller",
    "magnum_auto_healer_tag",
    "draino_tag",
    "master_lb_allowed_cidrs",
    "capi_helm_chart_version",
    "calico_tag",
    "cilium_tag",
    "cloud_provider_tag",
    "cinder_csi_enabled",
    "cinder_csi_plugin_tag",
    "octavia_lb_algorithm",
    "octavia_lb_healthcheck",
    "kubelet_options",
    "kubeapi_options",
    "kubecontroller_options",
    "kubeproxy_options",
    "kubescheduler_options",
    "use_podman",
    "hyperkube_prefix",
    "containerd_version",
    "containerd_tarball_url",
    "containerd_tarball_sha256",
];

fn truthy(label: &str, v: &str) -> Result<bool, LabelError> {
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" | "" => Ok(false),
        _ => Err(LabelError::Invalid {
            label: label.into(),
            value: v.into(),
            reason: "not a boolean (true/false)".into(),
        }),
    }
}

/// `a.b.c.d/n` (or IPv6), network address aligned.
fn cidr(label: &str, v: &str) -> Result<String, LabelError> {
    let bad = |reason: &str| LabelError::Invalid {
        label: label.into(),
        value: v.into(),
        reason: reason.into(),
    };
    let (ip, len) = v
        .trim()
        .split_once('/')
        .ok_or_else(|| bad("not a CIDR (address/prefix)"))?;
    let ip: IpAddr = ip.parse().map_err(|_| bad("not an IP address"))?;
    let len: u8 = len.parse().map_err(|_| bad("bad prefix length"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if len > max {
        return Err(bad("prefix length out of range"));
    }
    Ok(format!("{ip}/{len}"))
}

/// A Kubernetes release `v1.MINOR.PATCH`, ordered by (minor, patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    pub minor: u32,
    pub patch: u32,
}

/// The oldest minor the CAPI providers we drive still support.
pub const OLDEST_MINOR: u32 = 28;

impl KubeVersion {
    /// `v1.30.4` or `1.30.4`; `Err` says what is wrong with it.
    pub fn parse(v: &str) -> Result<KubeVersion, &'static str> {
        let t = v.trim();
        let core = t.strip_prefix('v').unwrap_or(t);
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() != 3
            || parts
                .iter()
                .any(|p| p.is_empty() || p.len() > 6 || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err("expected a Kubernetes version like v1.30.4");
        }
        if parts[0] != "1" {
            return Err("only Kubernetes 1.x exists");
        }
        let minor: u32 = parts[1].parse().map_err(|_| "bad minor version")?;
        let patch: u32 = parts[2].parse().map_err(|_| "bad patch version")?;
        Ok(KubeVersion { minor, patch })
    }
}

impl std::fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v1.{}.{}", self.minor, self.patch)
    }
}

/// `kube_tag`: `v1.MINOR.PATCH` (a leading `v` is added when missing).
pub fn kube_version(v: &str) -> Result<String, LabelError> {
    let bad = |reason: &str| LabelError::Invalid {
        label: "kube_tag".into(),
        value: v.into(),
        reason: reason.into(),
    };
    let k = KubeVersion::parse(v).map_err(bad)?;
    if k.minor < OLDEST_MINOR {
        return Err(bad(
            "Kubernetes older than v1.28 is not supported by the CAPI providers",
        ));
    }
    Ok(k.to_string())
}

fn count(label: &str, v: &str) -> Result<u32, LabelError> {
    v.trim().parse::<u32>().map_err(|_| LabelError::Invalid {
        label: label.into(),
        value: v.into(),
        reason: "not a non-negative integer".into(),
    })
}

fn non_empty(v: &str) -> Option<String> {
    let t = v.trim();
    (!t.is_empty()).then(|| t.to_string())
}

/// `labels` without those this conductor refuses (for a cluster whose
/// ClusterClass, not this conductor, provides what they ask for).
pub fn without_refused(mut labels: BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels.retain(|k, _| {
        !REFUSED.iter().any(|(l, _)| l == k) && !REFUSED_VALUES.iter().any(|(l, _)| l == k)
    });
    labels
}

/// Parse a cluster's labels; `network_driver` chooses which pod-CIDR label
/// applies. Returns the labels and warnings for ignored/unknown ones.
pub fn parse(
    labels: &BTreeMap<String, String>,
    network_driver: &str,
) -> Result<(Labels, Vec<String>), LabelError> {
    let get = |k: &str| labels.get(k).map(String::as_str);
    let mut warnings = Vec::new();
    let pool_label = if network_driver == "cilium" {
        "cilium_ipv4pool"
    } else {
        "calico_ipv4pool"
    };
    let other_pool = if network_driver == "cilium" {
        "calico_ipv4pool"
    } else {
        "cilium_ipv4pool"
    };
    let known: &[&str] = &[
        "kube_tag",
        "boot_volume_size",
        "boot_volume_type",
        "docker_volume_type",
        "availability_zone",
        "auto_healing_enabled",
        "auto_scaling_enabled",
        "fixed_subnet_cidr",
        "calico_ipv4pool",
        "cilium_ipv4pool",
        "service_cluster_ip_range",
        "dns_cluster_domain",
        "master_lb_floating_ip_enabled",
        "api_master_lb_allowed_cidrs",
        "octavia_provider",
        "container_infra_prefix",
        "min_node_count",
        "max_node_count",
        "capi_adopted_namespace",
        crate::cloud::identity::VOLUMES_POLICY_LABEL,
    ];
    for (k, v) in labels {
        if let Some((_, feature)) = REFUSED.iter().find(|(l, _)| l == k) {
            if truthy(k, v)? {
                return Err(LabelError::Unsupported {
                    label: k.clone(),
                    value: v.clone(),
                    feature,
                });
            }
        } else if let Some((_, feature)) = REFUSED_VALUES.iter().find(|(l, _)| l == k) {
            let empty = v.trim().is_empty() || (k.ends_with("_size") && v.trim() == "0");
            if !empty {
                return Err(LabelError::Unsupported {
                    label: k.clone(),
                    value: v.clone(),
                    feature,
                });
            }
        } else if IGNORED.contains(&k.as_str()) {
            warnings.push(format!(
                "label {k} has no effect on Cluster API clusters; ignored"
            ));
        } else if k == other_pool {
            warnings.push(format!(
                "label {k} does not apply with network_driver={network_driver}; ignored"
            ));
        } else if !known.contains(&k.as_str()) {
            warnings.push(format!("label {k} is not known to this conductor; ignored"));
        }
    }
    // What the delete's clean-up does with the cluster's volumes: checked
    // here, so a misspelt policy is refused at create, not met at delete.
    let policy_label = crate::cloud::identity::VOLUMES_POLICY_LABEL;
    if let Err(reason) = crate::cloud::identity::VolumesPolicy::parse(get(policy_label)) {
        return Err(LabelError::Invalid {
            label: policy_label.into(),
            value: get(policy_label).unwrap_or_default().into(),
            reason,
        });
    }
    let kube_version = kube_version(get("kube_tag").ok_or(LabelError::Missing("kube_tag"))?)?;
    let boot_volume_size_gb = match get("boot_volume_size").and_then(non_empty) {
        Some(v) => Some(count("boot_volume_size", &v)?).filter(|n| *n > 0),
        None => None,
    };
    let allowed: Vec<String> = match get("api_master_lb_allowed_cidrs").and_then(non_empty) {
        Some(v) => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| cidr("api_master_lb_allowed_cidrs", s))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let min_node_count = get("min_node_count")
        .and_then(non_empty)
        .map(|v| count("min_node_count", &v))
        .transpose()?;
    let max_node_count = get("max_node_count")
        .and_then(non_empty)
        .map(|v| count("max_node_count", &v))
        .transpose()?;
    if let (Some(lo), Some(hi)) = (min_node_count, max_node_count)
        && lo > hi
    {
        return Err(LabelError::Invalid {
            label: "min_node_count".into(),
            value: lo.to_string(),
            reason: format!("greater than max_node_count ({hi})"),
        });
    }
    let pod_cidr = cidr(
        pool_label,
        get(pool_label)
            .and_then(non_empty)
            .as_deref()
            .unwrap_or("10.100.0.0/16"),
    )?;
    let service_cidr = cidr(
        "service_cluster_ip_range",
        get("service_cluster_ip_range")
            .and_then(non_empty)
            .as_deref()
            .unwrap_or("10.254.0.0/16"),
    )?;
    if pod_cidr == service_cidr {
        return Err(LabelError::Invalid {
            label: pool_label.into(),
            value: pod_cidr,
            reason: "the pod and service ranges must differ".into(),
        });
    }
    let dns_domain = get("dns_cluster_domain")
        .and_then(non_empty)
        .unwrap_or_else(|| "cluster.local".into());
    if !dns_domain.split('.').all(|p| {
        !p.is_empty()
            && p.len() <= 63
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    }) {
        return Err(LabelError::Invalid {
            label: "dns_cluster_domain".into(),
            value: dns_domain,
            reason: "not a DNS domain".into(),
        });
    }
    let parsed = Labels {
        kube_version,
        boot_volume_size_gb,
        boot_volume_type: get("boot_volume_type").and_then(non_empty),
        docker_volume_type: get("docker_volume_type").and_then(non_empty),
        availability_zone: get("availability_zone").and_then(non_empty),
        auto_scaling: match get("auto_scaling_enabled") {
            Some(v) => truthy("auto_scaling_enabled", v)?,
            None => false,
        },
        auto_healing: match get("auto_healing_enabled") {
            Some(v) => truthy("auto_healing_enabled", v)?,
            None => true,
        },
        node_cidr: cidr(
            "fixed_subnet_cidr",
            get("fixed_subnet_cidr")
                .and_then(non_empty)
                .as_deref()
                .unwrap_or("10.0.0.0/24"),
        )?,
        pod_cidr,
        service_cidr,
        dns_domain,
        api_lb_floating_ip: match get("master_lb_floating_ip_enabled") {
            Some(v) => truthy("master_lb_floating_ip_enabled", v)?,
            None => true,
        },
        api_allowed_cidrs: allowed,
        octavia_provider: get("octavia_provider")
            .and_then(non_empty)
            .unwrap_or_else(|| "amphora".into()),
        container_infra_prefix: get("container_infra_prefix").and_then(non_empty),
        min_node_count,
        max_node_count,
    };
    Ok((parsed, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn volumes_policy_is_checked_at_create() {
        for v in ["delete", "keep", ""] {
            let (_, w) = parse(
                &l(&[("kube_tag", "v1.30.4"), ("volumes_policy", v)]),
                "calico",
            )
            .unwrap();
            assert!(w.is_empty(), "{w:?}");
        }
        let e = parse(
            &l(&[("kube_tag", "v1.30.4"), ("volumes_policy", "shred")]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("volumes_policy"), "{e}");
    }

    #[test]
    fn defaults_and_values() {
        let (p, w) = parse(&l(&[("kube_tag", "v1.30.4")]), "calico").unwrap();
        assert_eq!(p.kube_version, "v1.30.4");
        assert!(p.auto_healing && p.api_lb_floating_ip);
        assert_eq!(
            (
                p.pod_cidr.as_str(),
                p.service_cidr.as_str(),
                p.node_cidr.as_str()
            ),
            ("10.100.0.0/16", "10.254.0.0/16", "10.0.0.0/24")
        );
        assert_eq!(p.dns_domain, "cluster.local");
        assert_eq!(p.octavia_provider, "amphora");
        assert!(w.is_empty());

        let (p, w) = parse(
            &l(&[
                ("kube_tag", "1.31.2"),
                ("boot_volume_size", "40"),
                ("boot_volume_type", "ssd"),
                ("auto_healing_enabled", "False"),
                ("cilium_ipv4pool", "172.16.0.0/13"),
                ("api_master_lb_allowed_cidrs", "10.0.0.0/8, 192.168.1.0/24"),
                ("master_lb_floating_ip_enabled", "false"),
                ("octavia_provider", "ovn"),
                ("min_node_count", "1"),
                ("max_node_count", "5"),
                ("heat_container_agent_tag", "wallaby"),
                ("my_own_label", "x"),
            ]),
            "cilium",
        )
        .unwrap();
        assert_eq!(p.kube_version, "v1.31.2");
        assert_eq!(p.boot_volume_size_gb, Some(40));
        assert!(!p.auto_healing && !p.api_lb_floating_ip);
        assert_eq!(p.pod_cidr, "172.16.0.0/13");
        assert_eq!(p.api_allowed_cidrs, ["10.0.0.0/8", "192.168.1.0/24"]);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("heat_container_agent_tag") && w[1].contains("my_own_label"));
    }

    #[test]
    fn kube_versions_order_by_minor_then_patch() {
        let v = |s| KubeVersion::parse(s).unwrap();
        assert!(v("v1.30.10") > v("v1.30.9"));
        assert!(v("1.31.0") > v("v1.30.99"));
        assert_eq!(v("1.31.2").to_string(), "v1.31.2");
        for bad in ["v1.30", "v2.0.0", "v1.3x.0", "", "v1.30.4-rc.1"] {
            assert!(KubeVersion::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn refusals_name_the_label() {
        assert_eq!(
            parse(&l(&[]), "calico").unwrap_err(),
            LabelError::Missing("kube_tag")
        );
        for bad in ["latest", "v1.30", "v2.0.0", "v1.20.1", "v1.30.x"] {
            let e = parse(&l(&[("kube_tag", bad)]), "calico").unwrap_err();
            assert!(e.to_string().contains("kube_tag"), "{bad}: {e}");
        }
        let e = parse(
            &l(&[("kube_tag", "v1.30.4"), ("keystone_auth_enabled", "true")]),
            "calico",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("keystone_auth_enabled") && e.to_string().contains("webhook"),
            "{e}"
        );
        let (on, _) = parse(
            &l(&[("kube_tag", "v1.30.4"), ("auto_scaling_enabled", "True")]),
            "calico",
        )
        .unwrap();
        assert!(on.auto_scaling);
        let e = parse(
            &l(&[
                ("kube_tag", "v1.30.4"),
                ("auto_scaling_enabled", "sometimes"),
            ]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("auto_scaling_enabled"), "{e}");
        assert!(
            parse(
                &l(&[("kube_tag", "v1.30.4"), ("etcd_volume_size", "0")]),
                "calico"
            )
            .is_ok()
        );
        let e = parse(
            &l(&[("kube_tag", "v1.30.4"), ("etcd_volume_size", "10")]),
            "calico",
        )
        .unwrap_err();
        assert!(matches!(e, LabelError::Unsupported { .. }));
        let e = parse(
            &l(&[
                ("kube_tag", "v1.30.4"),
                ("api_master_lb_allowed_cidrs", "10.0.0.0/8,nope"),
            ]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("api_master_lb_allowed_cidrs"));
        let e = parse(
            &l(&[("kube_tag", "v1.30.4"), ("auto_healing_enabled", "maybe")]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("auto_healing_enabled"));
        let e = parse(
            &l(&[
                ("kube_tag", "v1.30.4"),
                ("min_node_count", "4"),
                ("max_node_count", "2"),
            ]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("min_node_count"));
        let e = parse(
            &l(&[
                ("kube_tag", "v1.30.4"),
                ("calico_ipv4pool", "10.254.0.0/16"),
            ]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("must differ"));
        let e = parse(
            &l(&[
                ("kube_tag", "v1.30.4"),
                ("dns_cluster_domain", "Bad_Domain"),
            ]),
            "calico",
        )
        .unwrap_err();
        assert!(e.to_string().contains("dns_cluster_domain"));
    }
}
