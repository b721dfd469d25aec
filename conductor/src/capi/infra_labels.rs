//! The labels about the cloud around the machines (pure): placement,
//! networks, storage, the API load balancer and the load balancers OCCM
//! makes, and the API server's audit log. Names and meanings are
//! vexxhost magnum-cluster-api's (`docs/user/labels.md`, its
//! `src/features/*.rs`) unless said otherwise; where the anchors default to
//! something that would change the machines of clusters created before
//! this conductor honoured the label, the default is "absent" and the table
//! (docs/labels.md) says so.

use std::net::IpAddr;

use super::label_values::{LabelError, count, non_empty, truthy};

/// Nova's server group policies (the compute API's
/// `os-server-groups` schema; one per group).
pub const SERVER_GROUP_POLICIES: [&str; 4] = [
    "affinity",
    "anti-affinity",
    "soft-affinity",
    "soft-anti-affinity",
];

/// Octavia's pool algorithms (`lb_algorithm`); the OVN provider only has
/// `SOURCE_IP_PORT` (ovn-octavia-provider, `constants.py`
/// `OVN_NATIVE_LB_ALGORITHMS`).
pub const LB_ALGORITHMS: [&str; 4] = [
    "ROUND_ROBIN",
    "LEAST_CONNECTIONS",
    "SOURCE_IP",
    "SOURCE_IP_PORT",
];

/// A dedicated Cinder volume for etcd on every control-plane machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdVolume {
    pub size_gb: u32,
    pub volume_type: Option<String>,
}

/// The API server's audit log (`audit_log_*`): kube-apiserver's
/// `audit-log-maxage` (days), `-maxbackup` (files) and `-maxsize` (MB).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditLog {
    pub max_age: u32,
    pub max_backup: u32,
    pub max_size: u32,
}

/// What these labels ask for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Infra {
    /// `boot_volume_availability_zone`: the root volume's AZ (default:
    /// `availability_zone`, as vexxhost falls back).
    pub boot_volume_az: Option<String>,
    /// `control_plane_availability_zones` (comma list) -> CAPO's
    /// `controlPlaneAvailabilityZones`: the failure domains KCP spreads
    /// the control plane over.
    pub control_plane_azs: Vec<String>,
    /// `api_server_lb_flavor` -> the API load balancer's Octavia flavor.
    pub api_lb_flavor: Option<String>,
    /// `api_server_lb_availability_zone` -> its availability zone.
    pub api_lb_az: Option<String>,
    /// `api_server_floating_ip`: an existing floating IP address for the API.
    pub api_floating_ip: Option<IpAddr>,
    /// `extra_network_names` (comma or space list): a port on each of
    /// these networks, after the cluster network's, on every machine.
    pub extra_networks: Vec<String>,
    /// `etcd_volume_size` / `etcd_volume_type` (capi-helm's
    /// `etcd_blockdevice_size` / `etcd_blockdevice_volume_type` alike).
    pub etcd_volume: Option<EtcdVolume>,
    /// `server_group_policies`: a Nova server group of this policy for the
    /// control plane and one for each worker group.
    pub server_group_policy: Option<String>,
    /// `different_failure_domain`: vexxhost's scheduler hint of that name.
    pub different_failure_domain: bool,
    /// `octavia_lb_algorithm`: OCCM's `lb-method` (default ROUND_ROBIN,
    /// SOURCE_IP_PORT with the OVN provider).
    pub lb_method: String,
    /// `octavia_lb_healthcheck` (default true): OCCM's `create-monitor`.
    pub lb_healthcheck: bool,
    /// `audit_log_enabled` and its limits.
    pub audit_log: Option<AuditLog>,
    /// The addons these labels ask for.
    pub addons: Addons,
}

/// Addons beyond the CNI, OCCM and Cinder CSI (HelmChartProxies,
/// [`super::addons`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Addons {
    /// `metrics_server_enabled` (default true, as Heat's and capi-helm's
    /// charts): `kubectl top`, HorizontalPodAutoscalers.
    pub metrics_server: bool,
    /// `ingress_controller=nginx`: ingress-nginx.
    pub ingress_nginx: bool,
    /// `monitoring_enabled` (default false, as capi-helm):
    /// kube-prometheus-stack.
    pub monitoring: bool,
    /// `cilium_hubble_ui_enabled` (Cilium only): Hubble, its relay and UI.
    pub hubble_ui: bool,
    /// `keystone_auth_enabled` (default false, as Heat's; vexxhost's is
    /// true): the k8s-keystone-auth webhook of this image tag
    /// (`k8s_keystone_auth_tag`), `capi::keystone_auth`.
    pub keystone_auth: Option<String>,
    /// `manila_csi_enabled` (default false; vexxhost's is true where the
    /// cloud has Manila): Manila CSI for NFS shares, `capi::manila`.
    pub manila: Option<Manila>,
}

/// Manila CSI: its plugin's image tag (`manila_csi_plugin_tag`) and the
/// share network its StorageClasses create shares on
/// (`manila_csi_share_network_id`; without it, no StorageClass, as
/// vexxhost's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manila {
    pub tag: String,
    pub share_network_id: Option<String>,
}

/// `k8s_keystone_auth_tag`'s default: cloud-provider-openstack's release
/// beside the OCCM chart 2.31.x this conductor installs.
pub const KEYSTONE_AUTH_DEFAULT_TAG: &str = "v1.31.1";

/// `manila_csi_plugin_tag`'s default: the chart's appVersion.
pub const MANILA_DEFAULT_TAG: &str = "v1.32.0";

fn image_tag(label: &str, tag: &str) -> Result<(), LabelError> {
    if tag.len() > 128
        || !tag
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "._-".contains(ch))
    {
        return Err(invalid(
            label,
            tag,
            "not an image tag (letters, digits, '.', '_', '-')",
        ));
    }
    Ok(())
}

fn invalid(label: &str, value: &str, reason: impl Into<String>) -> LabelError {
    LabelError::Invalid {
        label: label.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// An availability zone's name: Nova's rule (no `:`, which selects a host)
/// and no control characters.
fn zone(label: &str, v: &str) -> Result<String, LabelError> {
    let t = v.trim();
    if t.is_empty() || t.contains(':') || t.chars().any(char::is_control) || t.len() > 255 {
        return Err(invalid(
            label,
            v,
            format!("{t:?} is not an availability zone name"),
        ));
    }
    Ok(t.to_string())
}

/// A comma list without empty entries or repeats, in order.
fn list(v: &str, split: impl Fn(char) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for x in v.split(split).map(str::trim).filter(|x| !x.is_empty()) {
        if !out.iter().any(|y| y == x) {
            out.push(x.to_string());
        }
    }
    out
}

/// Parse these labels; `octavia_provider` is the parsed provider.
/// Returns them and warnings (labels set that do nothing without another).
pub fn parse(
    get: &dyn Fn(&str) -> Option<String>,
    octavia_provider: &str,
    network_driver: &str,
) -> Result<(Infra, Vec<String>), LabelError> {
    let mut warnings = Vec::new();
    let one = |a: &str, b: &str| -> Result<Option<(String, String)>, LabelError> {
        match (
            get(a).and_then(|v| non_empty(&v)),
            get(b).and_then(|v| non_empty(&v)),
        ) {
            (Some(x), Some(y)) if x != y => Err(invalid(
                a,
                &x,
                format!("{b} says {y:?}: the two name the same setting"),
            )),
            (Some(x), _) => Ok(Some((a.to_string(), x))),
            (None, Some(y)) => Ok(Some((b.to_string(), y))),
            (None, None) => Ok(None),
        }
    };
    let boot_volume_az = get("boot_volume_availability_zone")
        .and_then(|v| non_empty(&v))
        .map(|v| zone("boot_volume_availability_zone", &v))
        .transpose()?;
    let control_plane_azs = match get("control_plane_availability_zones") {
        Some(v) => list(&v, |c| c == ',')
            .iter()
            .map(|z| zone("control_plane_availability_zones", z))
            .collect::<Result<Vec<_>, _>>()?,
        None => Vec::new(),
    };
    let api_lb_flavor = get("api_server_lb_flavor").and_then(|v| non_empty(&v));
    let api_lb_az = get("api_server_lb_availability_zone")
        .and_then(|v| non_empty(&v))
        .map(|v| zone("api_server_lb_availability_zone", &v))
        .transpose()?;
    let api_floating_ip = match get("api_server_floating_ip").and_then(|v| non_empty(&v)) {
        Some(v) => Some(v.parse::<IpAddr>().map_err(|_| {
            invalid(
                "api_server_floating_ip",
                &v,
                "not an IP address (the address of a floating IP the project holds)",
            )
        })?),
        None => None,
    };
    let extra_networks = match get("extra_network_names") {
        Some(v) => list(&v, |c| c == ',' || c.is_whitespace()),
        None => Vec::new(),
    };
    let etcd_volume = match one("etcd_volume_size", "etcd_blockdevice_size")? {
        Some((label, v)) => {
            let size_gb = count(&label, &v)?;
            let volume_type = one("etcd_volume_type", "etcd_blockdevice_volume_type")?;
            if size_gb == 0 {
                if let Some((t, _)) = volume_type {
                    warnings.push(format!(
                        "label {t} has no effect without {label} > 0; ignored"
                    ));
                }
                None
            } else {
                Some(EtcdVolume {
                    size_gb,
                    volume_type: volume_type.map(|(_, t)| t),
                })
            }
        }
        None => {
            if let Some((t, _)) = one("etcd_volume_type", "etcd_blockdevice_volume_type")? {
                warnings.push(format!(
                    "label {t} has no effect without etcd_volume_size; ignored"
                ));
            }
            None
        }
    };
    let server_group_policy = match get("server_group_policies").and_then(|v| non_empty(&v)) {
        Some(v) => {
            let policies = list(&v, |c| c == ',');
            if let Some(bad) = policies
                .iter()
                .find(|p| !SERVER_GROUP_POLICIES.contains(&p.as_str()))
            {
                return Err(invalid(
                    "server_group_policies",
                    &v,
                    format!(
                        "{bad:?} is not a server group policy ({})",
                        SERVER_GROUP_POLICIES.join(", ")
                    ),
                ));
            }
            if policies.len() != 1 {
                return Err(invalid(
                    "server_group_policies",
                    &v,
                    "a Nova server group has exactly one policy",
                ));
            }
            policies.into_iter().next()
        }
        None => None,
    };
    let different_failure_domain = match get("different_failure_domain") {
        Some(v) => truthy("different_failure_domain", &v)?,
        None => false,
    };
    let ovn = octavia_provider == "ovn";
    let lb_method = match get("octavia_lb_algorithm").and_then(|v| non_empty(&v)) {
        Some(v) => {
            let m = v.to_ascii_uppercase();
            if !LB_ALGORITHMS.contains(&m.as_str()) {
                return Err(invalid(
                    "octavia_lb_algorithm",
                    &v,
                    format!("not an Octavia algorithm ({})", LB_ALGORITHMS.join(", ")),
                ));
            }
            if ovn && m != "SOURCE_IP_PORT" {
                return Err(invalid(
                    "octavia_lb_algorithm",
                    &v,
                    "the ovn provider has SOURCE_IP_PORT only",
                ));
            }
            m
        }
        None if ovn => "SOURCE_IP_PORT".into(),
        None => "ROUND_ROBIN".into(),
    };
    let lb_healthcheck = match get("octavia_lb_healthcheck") {
        Some(v) => truthy("octavia_lb_healthcheck", &v)?,
        None => true,
    };
    let limit = |label: &str, default: u32| -> Result<u32, LabelError> {
        match get(label).and_then(|v| non_empty(&v)) {
            Some(v) => count(label, &v),
            None => Ok(default),
        }
    };
    let limits = AuditLog {
        max_age: limit("audit_log_max_age", 30)?,
        max_backup: limit("audit_log_max_backup", 10)?,
        max_size: limit("audit_log_max_size", 100)?,
    };
    let audit_log = match get("audit_log_enabled") {
        Some(v) if truthy("audit_log_enabled", &v)? => Some(limits),
        _ => {
            for l in [
                "audit_log_max_age",
                "audit_log_max_backup",
                "audit_log_max_size",
            ] {
                if get(l).and_then(|v| non_empty(&v)).is_some() {
                    warnings.push(format!(
                        "label {l} has no effect without audit_log_enabled=true; ignored"
                    ));
                }
            }
            None
        }
    };
    let flag = |label: &str, default: bool| -> Result<bool, LabelError> {
        match get(label).and_then(|v| non_empty(&v)) {
            Some(v) => truthy(label, &v),
            None => Ok(default),
        }
    };
    let ingress_nginx = match get("ingress_controller").and_then(|v| non_empty(&v)) {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("nginx") => true,
        Some(v) => {
            return Err(invalid(
                "ingress_controller",
                &v,
                "only nginx (ingress-nginx) is provided; Heat's octavia and traefik are not",
            ));
        }
    };
    let hubble_ui = flag("cilium_hubble_ui_enabled", false)?;
    if hubble_ui && network_driver != "cilium" {
        return Err(invalid(
            "cilium_hubble_ui_enabled",
            "true",
            format!("Hubble is Cilium's; this cluster's network_driver is {network_driver}"),
        ));
    }
    let keystone_tag = get("k8s_keystone_auth_tag").and_then(|v| non_empty(&v));
    let keystone_auth = if flag("keystone_auth_enabled", false)? {
        let tag = keystone_tag.unwrap_or_else(|| KEYSTONE_AUTH_DEFAULT_TAG.to_string());
        image_tag("k8s_keystone_auth_tag", &tag)?;
        Some(tag)
    } else {
        if keystone_tag.is_some() {
            warnings.push(
                "label k8s_keystone_auth_tag has no effect without keystone_auth_enabled=true; ignored"
                    .to_string(),
            );
        }
        None
    };
    let manila_tag = get("manila_csi_plugin_tag").and_then(|v| non_empty(&v));
    let share_network = get("manila_csi_share_network_id").and_then(|v| non_empty(&v));
    let manila = if flag("manila_csi_enabled", false)? {
        let tag = manila_tag.unwrap_or_else(|| MANILA_DEFAULT_TAG.to_string());
        image_tag("manila_csi_plugin_tag", &tag)?;
        if let Some(n) = &share_network
            && uuid::Uuid::try_parse(n).is_err()
        {
            return Err(invalid(
                "manila_csi_share_network_id",
                n,
                "not a Manila share network id (a UUID)",
            ));
        }
        Some(Manila {
            tag,
            share_network_id: share_network,
        })
    } else {
        for (l, v) in [
            ("manila_csi_plugin_tag", &manila_tag),
            ("manila_csi_share_network_id", &share_network),
        ] {
            if v.is_some() {
                warnings.push(format!(
                    "label {l} has no effect without manila_csi_enabled=true; ignored"
                ));
            }
        }
        None
    };
    let addons = Addons {
        metrics_server: flag("metrics_server_enabled", true)?,
        ingress_nginx,
        monitoring: flag("monitoring_enabled", false)?,
        hubble_ui,
        keystone_auth,
        manila,
    };
    Ok((
        Infra {
            boot_volume_az,
            control_plane_azs,
            api_lb_flavor,
            api_lb_az,
            api_floating_ip,
            extra_networks,
            etcd_volume,
            server_group_policy,
            different_failure_domain,
            lb_method,
            lb_healthcheck,
            audit_log,
            addons,
        },
        warnings,
    ))
}

/// Where the audit policy and the log are, on the host and in the
/// kube-apiserver static pod (vexxhost's paths, `src/features/audit_log.rs`).
pub const AUDIT_POLICY_DIR: &str = "/etc/kubernetes/audit-policy";
pub const AUDIT_POLICY_FILE: &str = "/etc/kubernetes/audit-policy/apiserver-audit-policy.yaml";
pub const AUDIT_LOG_HOST_DIR: &str = "/var/log/kubernetes/audit";
pub const AUDIT_LOG_POD_DIR: &str = "/var/log/audit";
pub const AUDIT_LOG_FILE: &str = "/var/log/audit/kube-apiserver-audit.log";

/// The audit policy (audit.k8s.io/v1): nothing for health probes, version
/// and events; metadata only for secrets, config maps, tokens and token
/// reviews (their bodies hold secrets); metadata for reads; the request for
/// every change; metadata for anything else.
pub const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages:
- RequestReceived
rules:
- level: None
  nonResourceURLs:
  - /healthz*
  - /livez*
  - /readyz*
  - /version
- level: None
  resources:
  - group: \"\"
    resources: [\"events\"]
  - group: events.k8s.io
    resources: [\"events\"]
- level: Metadata
  resources:
  - group: \"\"
    resources: [\"secrets\", \"configmaps\", \"serviceaccounts/token\"]
  - group: authentication.k8s.io
    resources: [\"tokenreviews\"]
- level: Metadata
  verbs: [\"get\", \"list\", \"watch\"]
- level: Request
  verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]
- level: Metadata
";

impl AuditLog {
    /// kube-apiserver's flags.
    pub fn args(&self) -> Vec<(&'static str, String)> {
        vec![
            ("audit-log-path", AUDIT_LOG_FILE.into()),
            ("audit-log-maxage", self.max_age.to_string()),
            ("audit-log-maxbackup", self.max_backup.to_string()),
            ("audit-log-maxsize", self.max_size.to_string()),
            ("audit-policy-file", AUDIT_POLICY_FILE.into()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn with(pairs: &[(&str, &str)], provider: &str) -> Result<(Infra, Vec<String>), LabelError> {
        let m: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        parse(&|k: &str| m.get(k).cloned(), provider, "calico")
    }

    #[test]
    fn defaults_ask_for_nothing_new() {
        let (i, w) = with(&[], "amphora").unwrap();
        assert_eq!(
            i,
            Infra {
                lb_method: "ROUND_ROBIN".into(),
                lb_healthcheck: true,
                addons: Addons {
                    metrics_server: true,
                    ..Addons::default()
                },
                ..Default::default()
            }
        );
        assert!(w.is_empty());
        assert_eq!(with(&[], "ovn").unwrap().0.lb_method, "SOURCE_IP_PORT");
    }

    #[test]
    fn values_are_parsed() {
        let (i, w) = with(
            &[
                ("boot_volume_availability_zone", " az-2 "),
                ("control_plane_availability_zones", "az-1, az-2,,az-1"),
                ("api_server_lb_flavor", "ha"),
                ("api_server_lb_availability_zone", "az-3"),
                ("api_server_floating_ip", "203.0.113.7"),
                ("extra_network_names", "storage, backup other"),
                ("etcd_blockdevice_size", "20"),
                ("etcd_volume_type", "nvme"),
                ("server_group_policies", "anti-affinity"),
                ("different_failure_domain", "true"),
                ("octavia_lb_algorithm", "least_connections"),
                ("octavia_lb_healthcheck", "false"),
                ("audit_log_enabled", "true"),
                ("audit_log_max_size", "50"),
                ("metrics_server_enabled", "false"),
                ("ingress_controller", "nginx"),
                ("monitoring_enabled", "true"),
                ("keystone_auth_enabled", "true"),
            ],
            "amphora",
        )
        .unwrap();
        assert_eq!(
            i.addons,
            Addons {
                metrics_server: false,
                ingress_nginx: true,
                monitoring: true,
                hubble_ui: false,
                keystone_auth: Some(KEYSTONE_AUTH_DEFAULT_TAG.into()),
                manila: None,
            }
        );
        let net = "0f6a1b2c-3d4e-4b8a-9d3e-5b7c6a526f3e";
        let (m, mw) = with(
            &[
                ("manila_csi_enabled", "true"),
                ("manila_csi_share_network_id", net),
            ],
            "amphora",
        )
        .unwrap();
        assert_eq!(
            m.addons.manila,
            Some(Manila {
                tag: MANILA_DEFAULT_TAG.into(),
                share_network_id: Some(net.into())
            })
        );
        assert!(mw.is_empty(), "{mw:?}");
        let e = with(
            &[
                ("manila_csi_enabled", "true"),
                ("manila_csi_share_network_id", "private"),
            ],
            "amphora",
        )
        .unwrap_err();
        assert!(e.to_string().contains("manila_csi_share_network_id"), "{e}");
        let (m, mw) = with(&[("manila_csi_plugin_tag", "v1.31.0")], "amphora").unwrap();
        assert_eq!(m.addons.manila, None);
        assert!(mw[0].contains("manila_csi_enabled"), "{mw:?}");
        let (k, kw) = with(
            &[
                ("keystone_auth_enabled", "true"),
                ("k8s_keystone_auth_tag", "v1.30.2"),
            ],
            "amphora",
        )
        .unwrap();
        assert_eq!(k.addons.keystone_auth.as_deref(), Some("v1.30.2"));
        assert!(kw.is_empty(), "{kw:?}");
        let e = with(
            &[
                ("keystone_auth_enabled", "true"),
                ("k8s_keystone_auth_tag", "v1 ; rm"),
            ],
            "amphora",
        )
        .unwrap_err();
        assert!(e.to_string().contains("k8s_keystone_auth_tag"), "{e}");
        let (k, kw) = with(&[("k8s_keystone_auth_tag", "v1.30.2")], "amphora").unwrap();
        assert_eq!(k.addons.keystone_auth, None);
        assert!(kw[0].contains("keystone_auth_enabled"), "{kw:?}");
        let m: std::collections::BTreeMap<String, String> =
            [("cilium_hubble_ui_enabled".to_string(), "true".to_string())].into();
        let (c, _) = parse(&|k: &str| m.get(k).cloned(), "amphora", "cilium").unwrap();
        assert!(c.addons.hubble_ui);
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(i.boot_volume_az.as_deref(), Some("az-2"));
        assert_eq!(i.control_plane_azs, ["az-1", "az-2"]);
        assert_eq!(i.api_lb_flavor.as_deref(), Some("ha"));
        assert_eq!(i.api_lb_az.as_deref(), Some("az-3"));
        assert_eq!(i.api_floating_ip, Some("203.0.113.7".parse().unwrap()));
        assert_eq!(i.extra_networks, ["storage", "backup", "other"]);
        assert_eq!(
            i.etcd_volume,
            Some(EtcdVolume {
                size_gb: 20,
                volume_type: Some("nvme".into())
            })
        );
        assert_eq!(i.server_group_policy.as_deref(), Some("anti-affinity"));
        assert!(i.different_failure_domain);
        assert_eq!(i.lb_method, "LEAST_CONNECTIONS");
        assert!(!i.lb_healthcheck);
        let audit = i.audit_log.unwrap();
        assert_eq!(
            audit,
            AuditLog {
                max_age: 30,
                max_backup: 10,
                max_size: 50
            }
        );
        let args = audit.args();
        assert!(
            args.contains(&("audit-log-maxsize", "50".into())),
            "{args:?}"
        );
        assert!(args.contains(&("audit-policy-file", AUDIT_POLICY_FILE.into())));
        assert!(AUDIT_POLICY_FILE.starts_with(AUDIT_POLICY_DIR));
        assert!(AUDIT_LOG_FILE.starts_with(AUDIT_LOG_POD_DIR));
    }

    #[test]
    fn refusals_and_warnings_name_the_label() {
        for (pairs, provider, label) in [
            (
                vec![("server_group_policies", "anti-affinity,affinity")],
                "amphora",
                "server_group_policies",
            ),
            (
                vec![("server_group_policies", "spread")],
                "amphora",
                "server_group_policies",
            ),
            (
                vec![("api_server_floating_ip", "my-fip")],
                "amphora",
                "api_server_floating_ip",
            ),
            (
                vec![("control_plane_availability_zones", "nova:host1")],
                "amphora",
                "control_plane_availability_zones",
            ),
            (
                vec![("octavia_lb_algorithm", "ROUND_ROBIN")],
                "ovn",
                "octavia_lb_algorithm",
            ),
            (
                vec![("octavia_lb_algorithm", "RANDOM")],
                "amphora",
                "octavia_lb_algorithm",
            ),
            (
                vec![("etcd_volume_size", "10"), ("etcd_blockdevice_size", "20")],
                "amphora",
                "etcd_volume_size",
            ),
            (
                vec![("etcd_volume_size", "ten")],
                "amphora",
                "etcd_volume_size",
            ),
            (
                vec![("audit_log_enabled", "true"), ("audit_log_max_age", "-1")],
                "amphora",
                "audit_log_max_age",
            ),
            (
                vec![("different_failure_domain", "sometimes")],
                "amphora",
                "different_failure_domain",
            ),
            (
                vec![("ingress_controller", "traefik")],
                "amphora",
                "ingress_controller",
            ),
            (
                vec![("cilium_hubble_ui_enabled", "true")],
                "amphora",
                "cilium_hubble_ui_enabled",
            ),
            (
                vec![("monitoring_enabled", "perhaps")],
                "amphora",
                "monitoring_enabled",
            ),
        ] {
            let e = with(&pairs, provider).unwrap_err();
            assert!(e.to_string().contains(label), "{pairs:?}: {e}");
        }
        let (i, w) = with(
            &[("audit_log_max_age", "7"), ("etcd_volume_type", "nvme")],
            "amphora",
        )
        .unwrap();
        assert!(i.audit_log.is_none() && i.etcd_volume.is_none());
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("etcd_volume_type") && w[1].contains("audit_log_max_age"),
            "{w:?}"
        );
        let (i, _) = with(&[("etcd_volume_size", "0")], "amphora").unwrap();
        assert!(i.etcd_volume.is_none());
    }
}
