//! Which options this conductor reads ([`KNOWN`]: anything else in
//! magnum.conf belongs to magnum-api or oslo and is ignored), and their
//! documentation as the code reads them: `config-sample`
//! ([`sample`]) and the configuration reference ([`documented`], rendered
//! by [`super::reference`]). Kinds and defaults are recorded while the
//! configuration of an empty file is read ([`record`], called by
//! [`super::group::Group`]'s typed reads).

use super::{Config, help};

const KEYSTONE_AUTH_KEYS: &[&str] = &[
    "auth_url",
    "username",
    "user_id",
    "password",
    "user_domain_id",
    "user_domain_name",
    "project_id",
    "project_name",
    "project_domain_id",
    "project_domain_name",
    "system_scope",
    "cafile",
];

/// Every option this conductor reads, by group (others are logged and ignored).
pub(super) const KNOWN: &[(&str, &[&str])] = &[
    (
        "DEFAULT",
        &[
            "transport_url",
            "host",
            "control_exchange",
            "rpc_response_timeout",
            "debug",
            "rpc_ping_enabled",
            "executor_thread_pool_size",
            "periodic_interval_max",
            "log_file",
            "log_dir",
            "use_stderr",
            "use_json",
            "use_journal",
            "default_log_levels",
        ],
    ),
    (
        "database",
        &[
            "connection",
            "max_pool_size",
            "max_overflow",
            "pool_timeout",
            "connection_recycle_time",
            "max_retries",
            "retry_interval",
            "db_max_retries",
            "db_retry_interval",
            "db_inc_retry_interval",
            "db_max_retry_interval",
        ],
    ),
    ("conductor", &["topic", "legacy_topic", "max_message_bytes"]),
    (
        "oslo_messaging_rabbit",
        &[
            "amqp_durable_queues",
            "amqp_auto_delete",
            "rabbit_ha_queues",
            "rabbit_quorum_queue",
            "rabbit_transient_quorum_queue",
            "rabbit_quorum_delivery_limit",
            "rabbit_quorum_max_memory_length",
            "rabbit_quorum_max_memory_bytes",
            "rabbit_transient_queues_ttl",
            "rabbit_stream_fanout",
            "use_queue_manager",
            "hostname",
            "processname",
            "rabbit_qos_prefetch_count",
            "heartbeat_timeout_threshold",
            "heartbeat_rate",
            "kombu_reconnect_delay",
            "kombu_missing_consumer_retry_timeout",
            "kombu_reconnect_timeout",
            "direct_mandatory_flag",
            "enable_cancel_on_failover",
            "kombu_compression",
            "rabbit_login_method",
            "rabbit_retry_interval",
            "rabbit_retry_backoff",
            "rabbit_interval_max",
            "ssl",
            "ssl_version",
            "ssl_key_file",
            "ssl_cert_file",
            "ssl_ca_file",
        ],
    ),
    ("metrics", &["listen"]),
    (
        "oslo_messaging_notifications",
        &["driver", "topics", "transport_url", "retry"],
    ),
    ("keystone_auth", KEYSTONE_AUTH_KEYS),
    ("keystone_authtoken", KEYSTONE_AUTH_KEYS),
    (
        "x509",
        &[
            "allow_ca",
            "allowed_extensions",
            "allowed_key_usage",
            "term_of_validity",
            "rsa_key_size",
        ],
    ),
    ("certificates", &["cert_manager_type"]),
    (
        "capi",
        &[
            "kubeconfig",
            "namespace_prefix",
            "api_version",
            "calico_chart_repo",
            "calico_chart_version",
            "cilium_chart_repo",
            "cilium_chart_version",
            "occm_chart_repo",
            "occm_chart_version",
            "cinder_csi_chart_repo",
            "cinder_csi_chart_version",
            "metrics_server_chart_repo",
            "metrics_server_chart_version",
            "manila_csi_chart_repo",
            "manila_csi_chart_version",
            "nfs_csi_chart_repo",
            "nfs_csi_chart_version",
            "ingress_nginx_chart_repo",
            "ingress_nginx_chart_version",
            "monitoring_chart_repo",
            "monitoring_chart_version",
            "resync_interval",
            "credentials_interface",
            "verify_ca",
            "ca_file",
            "static_auth_url",
            "region_name",
            "static_application_credential_id",
            "static_application_credential_secret",
            "update_timeout",
            "cloud_cleanup",
            "cloud_cleanup_timeout",
            "autoscaler_image",
            "os_distros",
            "other_drivers",
            "ha_leases",
            "leader_election",
            "lease_namespace",
            "lease_duration",
            "api_proxy",
            "unknown_labels",
        ],
    ),
];

pub(super) fn is_known(group: &str, key: &str) -> bool {
    KNOWN
        .iter()
        .any(|(g, keys)| *g == group && keys.contains(&key))
}

thread_local! {
    /// While [`documented`] runs: every option read, with its kind and default.
    static READS: std::cell::RefCell<Option<Vec<Read>>> = const { std::cell::RefCell::new(None) };
}

#[derive(Debug, Clone)]
struct Read {
    group: &'static str,
    name: &'static str,
    kind: &'static str,
    default: Option<String>,
}

pub(super) fn record(
    group: &'static str,
    name: &'static str,
    kind: &'static str,
    default: Option<String>,
) {
    READS.with(|r| {
        if let Some(v) = r.borrow_mut().as_mut()
            && !v.iter().any(|x| x.group == group && x.name == name)
        {
            v.push(Read {
                group,
                name,
                kind,
                default,
            });
        }
    });
}

/// One option as `config-sample` and the configuration reference
/// (`docs/configuration.md`) show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionDoc {
    pub group: &'static str,
    pub name: &'static str,
    /// oslo-config-generator's words: "string value", "integer value"...
    pub kind: &'static str,
    /// As the code reads it; `<None>` when there is none.
    pub default: String,
    pub help: &'static str,
}

/// Every option this conductor reads, in [`KNOWN`]'s order, with its kind
/// and default as the code reads them (recorded while parsing an empty
/// configuration) and its help.
pub fn documented() -> Vec<OptionDoc> {
    READS.with(|r| *r.borrow_mut() = Some(Vec::new()));
    let _ = Config::from_text("");
    let reads = READS.with(|r| r.borrow_mut().take()).unwrap_or_default();
    let mut out = Vec::new();
    for (group, keys) in KNOWN {
        for key in keys.iter() {
            let read = reads.iter().find(|r| r.group == *group && r.name == *key);
            out.push(OptionDoc {
                group,
                name: key,
                kind: read.map(|r| r.kind).unwrap_or("string value"),
                default: read
                    .and_then(|r| r.default.clone())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| "<None>".into()),
                help: help::help(group, key).unwrap_or("(undocumented)"),
            });
        }
    }
    out
}

/// `magnum-conductor config-sample`: every option this conductor reads, in
/// oslo-config-generator's sample format, with its default and its help.
pub fn sample() -> String {
    let mut out = String::from(
        "# magnum-conductor (Rust) options, in oslo-config-generator's sample format.\n\
         # Generated by `magnum-conductor config-sample`; every option read is listed.\n",
    );
    let mut group = "";
    for o in documented() {
        if o.group != group {
            group = o.group;
            out.push_str(&format!("\n[{group}]\n"));
        }
        out.push_str(&format!(
            "\n# {} ({})\n#{} = {}\n",
            o.help, o.kind, o.name, o.default
        ));
    }
    out
}
