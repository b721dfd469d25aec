//! The label table (pure): every label of the two Cluster API drivers this
//! conductor replaces and of Magnum's Heat-era list, what each of them does
//! with it (from capi-drivers-survey.md §2.2: vexxhost magnum-cluster-api's
//! `docs/user/labels.md` and code, magnum-capi-helm's configuration guide
//! and `[capi_helm_cluster_labels]` defaults), and what this conductor
//! does, taken from [`super::labels`]' own lists, so the page
//! (`docs/labels.md`, `magnum-conductor label-table`) cannot drift from the
//! code: a unit test compares them.

use super::labels::{IGNORED, REFUSED, REFUSED_VALUES, SUPPORTED};

/// One label: what it means and what the anchors do with it.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub label: &'static str,
    pub meaning: &'static str,
    pub vexxhost: &'static str,
    pub capi_helm: &'static str,
    /// For a label this conductor supports: what it does and its default.
    pub ours: &'static str,
}

/// What this conductor does with a label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Treatment {
    Supported,
    /// Refused when it asks for the feature (any true value).
    RefusedWhenTrue(&'static str),
    /// Refused when set to a non-empty value.
    RefusedWhenSet(&'static str),
    /// Read by nobody here; a warning on the cluster.
    Ignored,
    /// Not in any list: unknown, a warning on the cluster.
    Unknown,
}

/// This conductor's treatment of `label`, from [`super::labels`]' lists.
pub fn treatment(label: &str) -> Treatment {
    if SUPPORTED.contains(&label) {
        Treatment::Supported
    } else if let Some((_, f)) = REFUSED.iter().find(|(l, _)| *l == label) {
        Treatment::RefusedWhenTrue(f)
    } else if let Some((_, f)) = REFUSED_VALUES.iter().find(|(l, _)| *l == label) {
        Treatment::RefusedWhenSet(f)
    } else if IGNORED.contains(&label) {
        Treatment::Ignored
    } else {
        Treatment::Unknown
    }
}

const fn row(
    label: &'static str,
    meaning: &'static str,
    vexxhost: &'static str,
    capi_helm: &'static str,
    ours: &'static str,
) -> Row {
    Row {
        label,
        meaning,
        vexxhost,
        capi_helm,
        ours,
    }
}

/// "—": the driver does not read the label.
const NO: &str = "—";

pub const ROWS: &[Row] = &[
    row(
        "kube_tag",
        "Kubernetes version",
        "required",
        "— (image property `kube_version`)",
        "required; the Kubernetes version of every machine",
    ),
    row(
        "boot_volume_size",
        "boot from a volume of this many GB",
        "`[cinder] default_boot_volume_size`",
        "same",
        "boot from volume when > 0; default: the flavor's disk",
    ),
    row(
        "boot_volume_type",
        "root volume type",
        "Cinder's default type",
        "`[cinder] default_boot_volume_type`",
        "the volume type; default: Cinder's",
    ),
    row(
        "boot_volume_availability_zone",
        "AZ of the root volume",
        "falls back to `availability_zone`",
        NO,
        "the root volume's availability zone; default: `availability_zone`",
    ),
    row(
        "docker_volume_type",
        "type of the container-storage volume",
        "default type",
        NO,
        "the volume type of `docker_volume_size`'s volume",
    ),
    row(
        "availability_zone",
        "availability zone of the machines",
        "workers' `failureDomain`, volumes' AZ",
        NO,
        "the machines' and volumes' availability zone",
    ),
    row(
        "control_plane_availability_zones",
        "control plane spread over AZs (comma list)",
        "`controlPlaneAvailabilityZones`",
        NO,
        "comma list -> CAPO `controlPlaneAvailabilityZones` (the failure domains KCP spreads the control plane over)",
    ),
    row(
        "auto_scaling_enabled",
        "cluster autoscaler",
        "false",
        "false",
        "default false; the autoscaler owns the replicas of groups with bounds",
    ),
    row(
        "min_node_count",
        "autoscaler lower bound",
        "node-group fields",
        "labels, else node_count",
        "the default worker group's lower bound",
    ),
    row(
        "max_node_count",
        "autoscaler upper bound",
        "node-group fields (min+1)",
        "labels, else node_count",
        "the default worker group's upper bound",
    ),
    row(
        "auto_healing_enabled",
        "MachineHealthChecks",
        "true",
        "true",
        "default true: MachineHealthChecks for every group",
    ),
    row(
        "auto_healing_controller",
        "draino or magnum-auto-healer (Heat)",
        NO,
        NO,
        "",
    ),
    row(
        "keystone_auth_enabled",
        "k8s-keystone-auth webhook",
        "**true**",
        "false",
        "Keystone tokens authenticate, the webhook's policy (vexxhost's default: the project's members list pods, services, deployments, PVCs in `default`) authorizes after RBAC: the webhook on the control-plane hosts (ClusterResourceSet, applied once: the policy ConfigMap is then the owner's), the API server's flags and webhook file; default false (Heat's; vexxhost's is true: set it on a template moved from there)",
    ),
    row(
        "k8s_keystone_auth_tag",
        "k8s-keystone-auth image tag",
        NO,
        NO,
        "the webhook's image tag (Heat's label); default v1.31.1; warned without `keystone_auth_enabled`",
    ),
    row(
        "octavia_provider",
        "Octavia provider of the load balancers",
        "CCM `lb-provider` (amphorav2); API LB only if set",
        "`amphora`, API LB and CCM",
        "default amphora, the API load balancer's provider",
    ),
    row(
        "octavia_lb_algorithm",
        "CCM lb-method",
        "ROUND_ROBIN (SOURCE_IP_PORT for ovn)",
        "same",
        "OCCM `lb-method`; default ROUND_ROBIN, SOURCE_IP_PORT (the only one) with `octavia_provider=ovn`",
    ),
    row(
        "octavia_lb_healthcheck",
        "CCM create-monitor",
        "true",
        "true",
        "OCCM `create-monitor`; default true",
    ),
    row(
        "api_server_lb_flavor",
        "Octavia flavor of the API load balancer",
        "supported (immutable)",
        NO,
        "CAPO `apiServerLoadBalancer.flavor` (clusters with an API load balancer)",
    ),
    row(
        "api_server_lb_availability_zone",
        "AZ of the API load balancer",
        "supported (immutable)",
        NO,
        "CAPO `apiServerLoadBalancer.availabilityZone` (clusters with an API load balancer)",
    ),
    row(
        "master_lb_floating_ip_enabled",
        "floating IP on the API load balancer",
        "true; false needs its proxy",
        "true",
        "default: the cluster's `floating_ip_enabled`; false: reached through magnum-capi-proxy",
    ),
    row(
        "api_server_floating_ip",
        "an existing floating IP for the API",
        "supported",
        NO,
        "an address the project holds -> CAPO `apiServerFloatingIP`; refused with `master_lb_floating_ip_enabled=false`",
    ),
    row(
        "api_master_lb_allowed_cidrs",
        "source CIDRs allowed to the API load balancer",
        NO,
        "comma list -> `allowedCidrs`",
        "comma list -> CAPO `allowedCIDRs`",
    ),
    row(
        "master_lb_allowed_cidrs",
        "Heat's name of `api_master_lb_allowed_cidrs`",
        NO,
        NO,
        "",
    ),
    row(
        "fixed_subnet_cidr",
        "the node subnet when one is created",
        "`10.0.0.0/24`",
        "`10.0.0.0/24`",
        "default 10.0.0.0/24",
    ),
    row(
        "dns_cluster_domain",
        "service DNS domain",
        "`cluster.local`",
        "— (chart `cluster.local`)",
        "default cluster.local",
    ),
    row(
        "service_cluster_ip_range",
        "service CIDR",
        "`10.254.0.0/16`",
        "— (chart 172.24.0.0/13)",
        "default 10.254.0.0/16",
    ),
    row(
        "calico_ipv4pool",
        "pod CIDR (Calico)",
        "`10.100.0.0/16`",
        "— (chart 172.16.0.0/13)",
        "default 10.100.0.0/16 with calico",
    ),
    row(
        "cilium_ipv4pool",
        "pod CIDR (Cilium)",
        "`10.100.0.0/16`",
        NO,
        "default 10.100.0.0/16 with cilium",
    ),
    row(
        "calico_tag",
        "Calico version",
        "bundled manifests",
        "— (chart pins)",
        "",
    ),
    row("cilium_tag", "Cilium version", "v1.15.3", NO, ""),
    row(
        "cilium_hubble_ui_enabled",
        "Hubble UI",
        "false",
        NO,
        "true (with `network_driver=cilium`): Hubble, its relay and UI in Cilium's chart; default false",
    ),
    row(
        "container_infra_prefix",
        "registry mirror for every image",
        "cluster and node group",
        NO,
        "the registry of every image of the cluster and its addons (each chart's images and sidecars, under their upstream paths: [operator guide](operator-guide.md#the-cloud-around-a-cluster))",
    ),
    row(
        "cloud_provider_tag",
        "OCCM image tag",
        "picked by Kubernetes minor",
        NO,
        "",
    ),
    row(
        "cinder_csi_enabled",
        "Cinder CSI",
        "true if Cinder exists",
        "always on",
        "",
    ),
    row(
        "cinder_csi_plugin_tag",
        "Cinder CSI image tag",
        "v1.32.0",
        NO,
        "",
    ),
    row(
        "manila_csi_enabled",
        "Manila CSI",
        "true if Manila exists",
        "— (chart has it, off)",
        "true: cloud-provider-openstack's Manila CSI (NFS, forwarding to kubernetes-csi's NFS node plugin), the cluster's credential in `kube-system/csi-manila-secrets` (a ClusterResourceSet that follows rotations); shares carry `manila.csi.openstack.org/cluster=<uuid>`; default false (vexxhost's is true where Manila exists: set it on a template moved from there)",
    ),
    row(
        "manila_csi_plugin_tag",
        "Manila CSI image tag",
        "v1.32.0",
        NO,
        "the plugin's image tag; default v1.32.0; warned without `manila_csi_enabled`",
    ),
    row(
        "manila_csi_share_network_id",
        "Manila share network",
        "supported",
        NO,
        "a StorageClass `share-<type>` per Manila share type the project sees (read from Manila with the cluster's credential at create and rotation), on this share network; without it, none (as vexxhost's); refused when the cloud has no Manila or no share type",
    ),
    row(
        "etcd_volume_size",
        "dedicated etcd volume (GB)",
        "0: none",
        "alias of `etcd_blockdevice_size`",
        "GB > 0: a Cinder volume per control-plane machine, mounted on /var/lib/etcd; default 0: none",
    ),
    row(
        "etcd_volume_type",
        "type of the etcd volume",
        "default type",
        "alias of `etcd_blockdevice_volume_type`",
        "the etcd volume's type; default: Cinder's",
    ),
    row(
        "etcd_blockdevice_size",
        "etcd block device (GB)",
        NO,
        "0: none",
        "capi-helm's name of `etcd_volume_size` (both set: equal)",
    ),
    row(
        "etcd_blockdevice_volume_type",
        "type of the etcd block device",
        NO,
        "default type",
        "capi-helm's name of `etcd_volume_type` (both set: equal)",
    ),
    row(
        "extra_network_names",
        "extra Neutron networks on every node",
        "— (PR #448 closed)",
        "supported",
        "comma or space list: a port on each network after the cluster network's, on every machine",
    ),
    row(
        "server_group_policies",
        "Nova server group policy",
        "`soft-anti-affinity`",
        NO,
        "one policy: a Nova server group per control plane and worker group, deleted with them; default none (a default would replace the machines of existing clusters)",
    ),
    row(
        "different_failure_domain",
        "scheduler hint to spread machines",
        "false",
        NO,
        "true: the scheduler hint `different_failure_domain` on every machine",
    ),
    row(
        "admission_control_list",
        "extra admission plugins",
        "supported",
        NO,
        "comma list -> kube-apiserver `enable-admission-plugins`, NodeRestriction first",
    ),
    row(
        "api_server_cert_sans",
        "extra API certificate names",
        "supported",
        NO,
        "comma list of names and addresses -> KCP `certSANs`",
    ),
    row(
        "api_server_tls_cipher_suites",
        "API server TLS ciphers",
        "Mozilla intermediate",
        NO,
        "comma list -> kube-apiserver `tls-cipher-suites`",
    ),
    row(
        "kubelet_tls_cipher_suites",
        "kubelet TLS ciphers",
        "Mozilla intermediate",
        NO,
        "comma list -> every kubelet's `tls-cipher-suites`",
    ),
    row(
        "audit_log_enabled",
        "API audit log",
        "false",
        NO,
        "true: kube-apiserver writes an audit log (policy file and log on the control-plane hosts); default false",
    ),
    row(
        "audit_log_max_age",
        "audit log retention (days)",
        "30",
        NO,
        "days -> `audit-log-maxage`; default 30",
    ),
    row(
        "audit_log_max_backup",
        "audit log files kept",
        "10",
        NO,
        "files -> `audit-log-maxbackup`; default 10",
    ),
    row(
        "audit_log_max_size",
        "audit log file size (MB)",
        "100",
        NO,
        "MB -> `audit-log-maxsize`; default 100",
    ),
    row(
        "oidc_issuer_url",
        "API server OIDC issuer",
        "supported",
        "— (chart has it, not exposed)",
        "-> kube-apiserver `oidc-issuer-url` (https; needs `oidc_client_id`)",
    ),
    row(
        "oidc_client_id",
        "OIDC client id",
        "supported",
        NO,
        "-> `oidc-client-id`",
    ),
    row(
        "oidc_username_claim",
        "OIDC username claim",
        "`sub`",
        NO,
        "-> `oidc-username-claim`, default `sub`",
    ),
    row(
        "oidc_username_prefix",
        "OIDC username prefix",
        "`-`",
        NO,
        "-> `oidc-username-prefix`, default `-`",
    ),
    row(
        "oidc_groups_claim",
        "OIDC groups claim",
        "supported",
        NO,
        "-> `oidc-groups-claim`",
    ),
    row(
        "oidc_groups_prefix",
        "OIDC groups prefix",
        "supported",
        NO,
        "-> `oidc-groups-prefix`",
    ),
    row(
        "monitoring_enabled",
        "kube-prometheus-stack",
        NO,
        "false",
        "true: kube-prometheus-stack (Prometheus, Alertmanager, Grafana, node exporter) in `monitoring-system`; default false (capi-helm's loki and blackbox exporter are not installed)",
    ),
    row(
        "kube_dashboard_enabled",
        "Kubernetes dashboard",
        NO,
        "a no-op on recent charts",
        "",
    ),
    row(
        "metrics_server_enabled",
        "metrics-server",
        "— (issue #296)",
        "— (deployed by the chart)",
        "default true: metrics-server (`kubectl top`, HorizontalPodAutoscalers), as Heat's and capi-helm's charts",
    ),
    row(
        "ingress_controller",
        "an ingress controller",
        "— (issue #8)",
        "— (hard-coded off)",
        "`nginx`: ingress-nginx in `ingress-nginx`; Heat's `octavia` and `traefik` are refused",
    ),
    row(
        "capi_helm_chart_version",
        "capi-helm's chart version",
        NO,
        "`[capi_helm] default_helm_chart_version`",
        "",
    ),
    row(
        "capi_adopted_namespace",
        "set by `magnum-conductor adopt` on a cluster it took over",
        NO,
        NO,
        "written by `adopt` only; refused on a new cluster",
    ),
    row(
        "volumes_policy",
        "what a delete does with the cluster's volumes",
        NO,
        "janitor annotation `volumes-policy`",
        "default delete; keep: volumes stay (operator-guide.md)",
    ),
    row("heat_container_agent_tag", "Heat's agent", NO, NO, ""),
    row("cgroup_driver", "Heat's cgroup driver", NO, NO, ""),
    row("container_runtime", "Heat's runtime", NO, NO, ""),
    row("selinux_mode", "Heat's SELinux mode", NO, NO, ""),
    row("npd_enabled", "node problem detector (Heat)", NO, NO, ""),
    row("cert_manager_api", "Heat's cert-manager API", NO, NO, ""),
    row(
        "influx_grafana_dashboard_enabled",
        "Heat's InfluxDB dashboard",
        NO,
        NO,
        "",
    ),
    row("tiller_enabled", "Heat's Helm 2 Tiller", NO, NO, ""),
    row("tiller_tag", "Heat's Tiller tag", NO, NO, ""),
    row("tiller_namespace", "Heat's Tiller namespace", NO, NO, ""),
    row("helm_client_url", "Heat's Helm client", NO, NO, ""),
    row(
        "helm_client_sha256",
        "Heat's Helm client checksum",
        NO,
        NO,
        "",
    ),
    row("helm_client_tag", "Heat's Helm client tag", NO, NO, ""),
    row("flannel_tag", "Heat's Flannel", NO, NO, ""),
    row("flannel_cni_tag", "Heat's Flannel CNI", NO, NO, ""),
    row("flannel_network_cidr", "Heat's Flannel network", NO, NO, ""),
    row(
        "flannel_network_subnetlen",
        "Heat's Flannel subnet length",
        NO,
        NO,
        "",
    ),
    row("flannel_backend", "Heat's Flannel backend", NO, NO, ""),
    row(
        "kube_dashboard_version",
        "Heat's dashboard version",
        NO,
        NO,
        "",
    ),
    row(
        "metrics_server_chart_tag",
        "Heat's metrics-server chart",
        NO,
        NO,
        "",
    ),
    row("prometheus_monitoring", "Heat's Prometheus", NO, NO, ""),
    row(
        "magnum_auto_healer_tag",
        "Heat's auto-healer tag",
        NO,
        NO,
        "",
    ),
    row("draino_tag", "Heat's draino tag", NO, NO, ""),
    row("kubelet_options", "Heat's kubelet flags", NO, NO, ""),
    row("kubeapi_options", "Heat's API server flags", NO, NO, ""),
    row(
        "kubecontroller_options",
        "Heat's controller-manager flags",
        NO,
        NO,
        "",
    ),
    row("kubeproxy_options", "Heat's kube-proxy flags", NO, NO, ""),
    row(
        "kubescheduler_options",
        "Heat's scheduler flags",
        NO,
        NO,
        "",
    ),
    row("use_podman", "Heat's podman switch", NO, NO, ""),
    row("hyperkube_prefix", "Heat's hyperkube registry", NO, NO, ""),
    row(
        "containerd_version",
        "Heat's containerd version",
        NO,
        NO,
        "",
    ),
    row(
        "containerd_tarball_url",
        "Heat's containerd tarball",
        NO,
        NO,
        "",
    ),
    row(
        "containerd_tarball_sha256",
        "Heat's containerd checksum",
        NO,
        NO,
        "",
    ),
];

/// Why an ignored label that is not a Heat-era knob is ignored.
const IGNORED_WHY: &[(&str, &str)] = &[
    (
        "calico_tag",
        "the CNI's version is the chart's, from `[capi]` options",
    ),
    (
        "cilium_tag",
        "the CNI's version is the chart's, from `[capi]` options",
    ),
    (
        "cloud_provider_tag",
        "OCCM's version is the chart's, from `[capi]` options",
    ),
    (
        "cinder_csi_plugin_tag",
        "Cinder CSI's version is the chart's, from `[capi]` options",
    ),
    ("cinder_csi_enabled", "Cinder CSI is always installed"),
    (
        "master_lb_allowed_cidrs",
        "Heat's name: use `api_master_lb_allowed_cidrs`",
    ),
    ("capi_helm_chart_version", "capi-helm's own"),
    (
        "auto_healing_controller",
        "auto-healing is CAPI's MachineHealthChecks",
    ),
];

/// This conductor's column for `row`.
pub fn ours(r: &Row) -> String {
    match treatment(r.label) {
        Treatment::Supported => format!("**supported**: {}", r.ours),
        Treatment::RefusedWhenTrue(f) => {
            format!("refused when true: {f} is not provided (the create fails naming the label)")
        }
        Treatment::RefusedWhenSet(f) => {
            format!("refused when set: {f} is not provided (the create fails naming the label)")
        }
        Treatment::Ignored => format!(
            "ignored: {} (a warning on the cluster)",
            IGNORED_WHY
                .iter()
                .find(|(l, _)| *l == r.label)
                .map(|(_, why)| *why)
                .unwrap_or("a Heat-era knob with no meaning on Cluster API")
        ),
        Treatment::Unknown => "unknown: ignored (a warning on the cluster)".into(),
    }
}

/// `docs/labels.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Cluster labels\n\n\
         Generated by `magnum-conductor label-table` from the code that reads the labels \
         (`conductor/src/capi/labels.rs`); a unit test keeps this page and the code equal. \
         Every label of vexxhost magnum-cluster-api and magnum-capi-helm (as \
         capi-drivers-survey.md §2.2 records them) and of Magnum's Heat-era list. \
         \"—\": that driver does not read the label. A refused label fails the create with a \
         reason naming it; an ignored or unknown one is named in the cluster's \
         `status_reason` once it is complete (`[capi] unknown_labels = error` refuses \
         unknown ones instead). An upgrade to another template moves the labels the \
         cluster inherited to the new template's values and keeps those it was given at \
         create, and those that cannot change on a running cluster (docs/lifecycle.md, \
         `cluster_upgrade`).\n\n\
         | label | meaning | vexxhost | capi-helm | this conductor |\n\
         |---|---|---|---|---|\n",
    );
    for r in ROWS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            r.label,
            r.meaning,
            r.vexxhost,
            r.capi_helm,
            ours(r).replace('|', "\\|")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_the_code_knows_is_in_the_table_once() {
        let listed: Vec<&str> = ROWS.iter().map(|r| r.label).collect();
        let mut sorted = listed.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), listed.len(), "a label is listed twice");
        let code = SUPPORTED
            .iter()
            .copied()
            .chain(REFUSED.iter().map(|(l, _)| *l))
            .chain(REFUSED_VALUES.iter().map(|(l, _)| *l))
            .chain(IGNORED.iter().copied());
        for l in code {
            assert!(
                listed.contains(&l),
                "{l} is read by the code but not in the table"
            );
        }
        for r in ROWS {
            // A supported label says what it does; the others' column is
            // generated from the lists.
            assert_eq!(
                treatment(r.label) == Treatment::Supported,
                !r.ours.is_empty(),
                "{}: `ours` is for supported labels only",
                r.label
            );
        }
    }

    #[test]
    fn the_label_page_is_what_the_code_does() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/labels.md");
        let page = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            page == markdown(),
            "docs/labels.md differs from the code; regenerate it: \
             target/debug/magnum-conductor label-table > docs/labels.md"
        );
    }
}
