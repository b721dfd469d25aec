//! Magnum cluster labels, as this conductor understands them (pure).
//!
//! Every label is one of:
//! - **supported**: parsed and validated here, used by the CAPI rendering;
//! - **refused when it asks for something we do not do** (`kube_dashboard_enabled=true`): the create fails with a
//!   reason naming the label, instead of a cluster that silently lacks the feature;
//! - **Heat-era knobs** with no meaning on Cluster API: ignored, reported as a warning;
//! - anything else: unknown, ignored, reported as a warning.
//!
//! Defaults follow the two existing CAPI drivers where they agree
//! (capi-drivers-survey.md §2.2).

use std::collections::BTreeMap;

pub use super::label_values::LabelError;
use super::label_values::{count, non_empty, truthy};
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
    /// The API server: extra certificate names, TLS ciphers, admission
    /// plugins and OIDC ([`ApiServer`]).
    pub api_server: ApiServer,
    /// `kubelet_tls_cipher_suites`: every kubelet's `tls-cipher-suites`.
    pub kubelet_tls_cipher_suites: Option<String>,
    /// Placement, networks, storage, load balancers and the audit log
    /// ([`super::infra_labels`]).
    pub infra: super::infra_labels::Infra,
}

/// What the API server labels ask of kube-apiserver (vexxhost's names and
/// meanings, `docs/user/labels.md`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApiServer {
    /// `api_server_cert_sans` (comma list): extra names and addresses in
    /// its serving certificate (KCP `certSANs`).
    pub cert_sans: Vec<String>,
    /// `api_server_tls_cipher_suites` -> `tls-cipher-suites`.
    pub tls_cipher_suites: Option<String>,
    /// `admission_control_list` -> `enable-admission-plugins`, with
    /// NodeRestriction first (as vexxhost adds it).
    pub admission_plugins: Option<String>,
    /// `oidc_*` -> `oidc-*`, when `oidc_issuer_url` is set.
    pub oidc: Option<Oidc>,
}

/// kube-apiserver's OIDC flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Oidc {
    pub issuer_url: String,
    pub client_id: String,
    /// Default `sub` (vexxhost's).
    pub username_claim: String,
    /// Default `-` (no prefix; vexxhost's).
    pub username_prefix: String,
    pub groups_claim: Option<String>,
    pub groups_prefix: Option<String>,
}

impl ApiServer {
    /// kube-apiserver `extraArgs` these labels add, in flag order.
    pub fn args(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(c) = &self.tls_cipher_suites {
            out.push(("tls-cipher-suites", c.clone()));
        }
        if let Some(a) = &self.admission_plugins {
            out.push(("enable-admission-plugins", a.clone()));
        }
        if let Some(o) = &self.oidc {
            out.push(("oidc-issuer-url", o.issuer_url.clone()));
            out.push(("oidc-client-id", o.client_id.clone()));
            out.push(("oidc-username-claim", o.username_claim.clone()));
            out.push(("oidc-username-prefix", o.username_prefix.clone()));
            if let Some(g) = &o.groups_claim {
                out.push(("oidc-groups-claim", g.clone()));
            }
            if let Some(g) = &o.groups_prefix {
                out.push(("oidc-groups-prefix", g.clone()));
            }
        }
        out
    }
}

/// A comma list of Go TLS cipher suite names (`TLS_...`), as
/// `tls-cipher-suites` takes it (kube-apiserver and the kubelet check the
/// names themselves: `k8s.io/component-base/cli/flag`, `TLSCipherSuites`).
fn cipher_suites(label: &str, v: &str) -> Result<Option<String>, LabelError> {
    let names: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    if let Some(bad) = names.iter().find(|n| {
        !n.starts_with("TLS_")
            || !n
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    }) {
        return Err(LabelError::Invalid {
            label: label.into(),
            value: v.into(),
            reason: format!("{bad:?} is not a TLS cipher suite name (TLS_...)"),
        });
    }
    Ok(Some(names.join(",")))
}

/// A DNS name or an IP address for a certificate.
fn san(label: &str, v: &str) -> Result<String, LabelError> {
    let t = v.trim();
    let ok = t.parse::<IpAddr>().is_ok()
        || (!t.is_empty()
            && t.len() <= 253
            && t.split('.').all(|p| {
                !p.is_empty()
                    && p.len() <= 63
                    && p.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'*')
            }));
    if !ok {
        return Err(LabelError::Invalid {
            label: label.into(),
            value: v.into(),
            reason: format!("{t:?} is not a DNS name or an IP address"),
        });
    }
    Ok(t.to_ascii_lowercase())
}

fn api_server(get: &dyn Fn(&str) -> Option<String>) -> Result<ApiServer, LabelError> {
    let cert_sans = match get("api_server_cert_sans") {
        Some(v) => v
            .split(',')
            .filter(|x| !x.trim().is_empty())
            .map(|x| san("api_server_cert_sans", x))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let tls_cipher_suites = match get("api_server_tls_cipher_suites") {
        Some(v) => cipher_suites("api_server_tls_cipher_suites", &v)?,
        None => None,
    };
    let admission_plugins = get("admission_control_list").map(|v| {
        let mut plugins = vec!["NodeRestriction".to_string()];
        for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if !plugins.iter().any(|x| x == p) {
                plugins.push(p.to_string());
            }
        }
        plugins.join(",")
    });
    if let Some(bad) = admission_plugins.as_deref().and_then(|a| {
        a.split(',')
            .find(|p| !p.bytes().all(|b| b.is_ascii_alphanumeric()))
    }) {
        return Err(LabelError::Invalid {
            label: "admission_control_list".into(),
            value: get("admission_control_list").unwrap_or_default(),
            reason: format!("{bad:?} is not an admission plugin name"),
        });
    }
    let oidc = match get("oidc_issuer_url") {
        None => {
            if let Some(k) = [
                "oidc_client_id",
                "oidc_username_claim",
                "oidc_username_prefix",
                "oidc_groups_claim",
                "oidc_groups_prefix",
            ]
            .into_iter()
            .find(|k| get(k).is_some())
            {
                return Err(LabelError::Invalid {
                    label: k.into(),
                    value: get(k).unwrap_or_default(),
                    reason: "needs oidc_issuer_url".into(),
                });
            }
            None
        }
        Some(issuer) => {
            if !issuer.starts_with("https://") || issuer.contains(char::is_whitespace) {
                return Err(LabelError::Invalid {
                    label: "oidc_issuer_url".into(),
                    value: issuer,
                    reason: "kube-apiserver only accepts an https:// issuer".into(),
                });
            }
            let client_id = get("oidc_client_id").ok_or(LabelError::Missing("oidc_client_id"))?;
            Some(Oidc {
                issuer_url: issuer,
                client_id,
                username_claim: get("oidc_username_claim").unwrap_or_else(|| "sub".into()),
                username_prefix: get("oidc_username_prefix").unwrap_or_else(|| "-".into()),
                groups_claim: get("oidc_groups_claim"),
                groups_prefix: get("oidc_groups_prefix"),
            })
        }
    };
    Ok(ApiServer {
        cert_sans,
        tls_cipher_suites,
        admission_plugins,
        oidc,
    })
}

/// The labels this conductor reads and honours.
pub const SUPPORTED: &[&str] = &[
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
    "api_server_cert_sans",
    "api_server_tls_cipher_suites",
    "kubelet_tls_cipher_suites",
    "admission_control_list",
    "oidc_issuer_url",
    "oidc_client_id",
    "oidc_username_claim",
    "oidc_username_prefix",
    "oidc_groups_claim",
    "oidc_groups_prefix",
    "boot_volume_availability_zone",
    "control_plane_availability_zones",
    "api_server_lb_flavor",
    "api_server_lb_availability_zone",
    "api_server_floating_ip",
    "extra_network_names",
    "etcd_volume_size",
    "etcd_volume_type",
    "etcd_blockdevice_size",
    "etcd_blockdevice_volume_type",
    "server_group_policies",
    "different_failure_domain",
    "octavia_lb_algorithm",
    "octavia_lb_healthcheck",
    "audit_log_enabled",
    "audit_log_max_age",
    "audit_log_max_backup",
    "audit_log_max_size",
    "metrics_server_enabled",
    "ingress_controller",
    "monitoring_enabled",
    "cilium_hubble_ui_enabled",
    "keystone_auth_enabled",
    "k8s_keystone_auth_tag",
    "manila_csi_enabled",
    "manila_csi_plugin_tag",
    "manila_csi_share_network_id",
];

/// Labels that request a feature we do not implement, when set to a value
/// that turns it on: (label, feature, is the value a request?).
pub const REFUSED: &[(&str, &str)] = &[("kube_dashboard_enabled", "the Kubernetes dashboard")];

/// Labels whose non-empty value we cannot honour.
pub const REFUSED_VALUES: &[(&str, &str)] = &[];

/// Heat-era and driver-specific labels with no meaning here (ignored, warned).
pub const IGNORED: &[&str] = &[
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
    let known = SUPPORTED;
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
    let octavia_provider = get("octavia_provider")
        .and_then(non_empty)
        .unwrap_or_else(|| "amphora".into());
    let (infra, more) = super::infra_labels::parse(
        &|k: &str| get(k).map(str::to_string),
        &octavia_provider,
        network_driver,
    )?;
    warnings.extend(more);
    let api_lb_floating_ip = match get("master_lb_floating_ip_enabled") {
        Some(v) => truthy("master_lb_floating_ip_enabled", v)?,
        None => true,
    };
    if let Some(fip) = infra.api_floating_ip
        && !api_lb_floating_ip
    {
        return Err(LabelError::Invalid {
            label: "api_server_floating_ip".into(),
            value: fip.to_string(),
            reason: "master_lb_floating_ip_enabled=false asks for no floating IP on the API".into(),
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
        api_lb_floating_ip,
        api_allowed_cidrs: allowed,
        octavia_provider,
        container_infra_prefix: get("container_infra_prefix").and_then(non_empty),
        min_node_count,
        max_node_count,
        api_server: api_server(&|k: &str| get(k).and_then(non_empty))?,
        kubelet_tls_cipher_suites: match get("kubelet_tls_cipher_suites") {
            Some(v) => cipher_suites("kubelet_tls_cipher_suites", v)?,
            None => None,
        },
        infra,
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
    fn api_server_labels_are_validated_and_become_flags() {
        let base = [("kube_tag", "v1.30.4")];
        let with = |extra: &[(&str, &str)]| {
            let mut m = l(&base);
            m.extend(l(extra));
            parse(&m, "calico")
        };
        let (p, w) = with(&[
            ("api_server_cert_sans", "api.example.com, 192.0.2.7"),
            (
                "api_server_tls_cipher_suites",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            ),
            (
                "kubelet_tls_cipher_suites",
                "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            ),
            ("admission_control_list", "AlwaysPullImages,NodeRestriction"),
            ("oidc_issuer_url", "https://issuer.example.com"),
            ("oidc_client_id", "kubernetes"),
            ("oidc_groups_claim", "groups"),
        ])
        .unwrap();
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(p.api_server.cert_sans, ["api.example.com", "192.0.2.7"]);
        assert_eq!(
            p.kubelet_tls_cipher_suites.as_deref(),
            Some("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")
        );
        let want: Vec<(&str, String)> = [
            (
                "tls-cipher-suites",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            ),
            // NodeRestriction first, once.
            (
                "enable-admission-plugins",
                "NodeRestriction,AlwaysPullImages",
            ),
            ("oidc-issuer-url", "https://issuer.example.com"),
            ("oidc-client-id", "kubernetes"),
            ("oidc-username-claim", "sub"),
            ("oidc-username-prefix", "-"),
            ("oidc-groups-claim", "groups"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect();
        assert_eq!(p.api_server.args(), want);
        for (bad, why) in [
            (vec![("api_server_cert_sans", "a b")], "not a DNS name"),
            (
                vec![("api_server_tls_cipher_suites", "RC4")],
                "not a TLS cipher suite",
            ),
            (
                vec![("kubelet_tls_cipher_suites", "tls_aes")],
                "not a TLS cipher suite",
            ),
            (
                vec![("admission_control_list", "Bad-Plugin")],
                "not an admission plugin",
            ),
            (vec![("oidc_client_id", "k")], "needs oidc_issuer_url"),
            (
                vec![
                    ("oidc_issuer_url", "http://issuer"),
                    ("oidc_client_id", "k"),
                ],
                "https://",
            ),
            (
                vec![("oidc_issuer_url", "https://issuer")],
                "oidc_client_id is required",
            ),
        ] {
            let e = with(&bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        // Unset: no flag at all.
        let (p, _) = with(&[]).unwrap();
        assert!(p.api_server.args().is_empty() && p.api_server.cert_sans.is_empty());
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
            &l(&[("kube_tag", "v1.30.4"), ("kube_dashboard_enabled", "true")]),
            "calico",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("kube_dashboard_enabled") && e.to_string().contains("dashboard"),
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
            &l(&[
                ("kube_tag", "v1.30.4"),
                ("manila_csi_enabled", "true"),
                ("manila_csi_share_network_id", "x"),
            ]),
            "calico",
        )
        .unwrap_err();
        assert!(
            matches!(e, LabelError::Invalid { ref label, .. } if label == "manila_csi_share_network_id"),
            "{e}"
        );
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
