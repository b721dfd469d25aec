//! The conductor's configuration, read from magnum.conf the way oslo.config
//! reads it (see [`ini`]), typed with Magnum's and oslo.messaging's
//! defaults for every option this conductor uses.
//!
//! Options the conductor does not read (magnum.conf is shared with
//! magnum-api) are ignored with a debug log. An option that is set but
//! invalid is a startup error naming `[group] option`.

pub mod help;
pub mod ini;

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::secret::Secret;
use crate::transport_url::{TransportUrl, TransportUrlError};
pub use ini::{Layered, LoadError};

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Load(#[from] LoadError),
    #[error("invalid value for [{group}] {name}: {reason}")]
    Invalid {
        group: &'static str,
        name: &'static str,
        reason: String,
    },
    #[error("[DEFAULT] transport_url: {0}")]
    TransportUrl(#[from] TransportUrlError),
    #[error("configuration error: {0}")]
    Conflict(String),
}

/// `[DEFAULT]` options.
#[derive(Debug, Clone)]
pub struct DefaultOpts {
    /// `transport_url` (a secret: it holds the broker password).
    pub transport_url: Secret,
    /// `host`: names the `magnum_service` row (Magnum 23: no default).
    pub host: Option<String>,
    /// `control_exchange`: Magnum sets it to `magnum`.
    pub control_exchange: String,
    pub rpc_response_timeout: u64,
    pub debug: bool,
    pub rpc_ping_enabled: bool,
    /// Handler slots per lane, calls and casts (`executor_thread_pool_size`).
    pub executor_thread_pool_size: usize,
    /// Seconds between service heartbeats (oslo.service's periodic default).
    pub periodic_interval_max: u64,
    /// oslo.log: `log_file` (joined to `log_dir` when relative).
    pub log_file: Option<String>,
    pub log_dir: Option<String>,
    /// Also log to stderr when logging to a file or the journal.
    pub use_stderr: bool,
    /// One JSON object per line (oslo.log's JSONFormatter role).
    pub use_json: bool,
    /// Native systemd journal protocol.
    pub use_journal: bool,
    /// `target=LEVEL` pairs (oslo.log's `default_log_levels`).
    pub default_log_levels: Vec<String>,
}

/// `[conductor]` options.
#[derive(Debug, Clone)]
pub struct ConductorOpts {
    pub topic: String,
    /// The topic of Python magnum-conductors that run the other drivers'
    /// clusters: requests about those clusters are forwarded there (None:
    /// refused).
    pub legacy_topic: Option<String>,
    /// Largest request body (after decompression) we decode, in bytes.
    pub max_message_bytes: usize,
}

/// `[oslo_messaging_rabbit]` options that change what is declared or how we
/// connect, after the transport URL's query overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct RabbitOpts {
    pub amqp_durable_queues: bool,
    pub amqp_auto_delete: bool,
    pub rabbit_ha_queues: bool,
    pub rabbit_quorum_queue: bool,
    pub rabbit_transient_quorum_queue: bool,
    pub rabbit_quorum_delivery_limit: i64,
    pub rabbit_quorum_max_memory_length: i64,
    pub rabbit_quorum_max_memory_bytes: i64,
    pub rabbit_transient_queues_ttl: i64,
    pub rabbit_stream_fanout: bool,
    pub use_queue_manager: bool,
    pub hostname: String,
    pub processname: String,
    pub rabbit_qos_prefetch_count: u16,
    pub heartbeat_timeout_threshold: u16,
    pub heartbeat_rate: u32,
    pub kombu_reconnect_delay: f64,
    pub kombu_missing_consumer_retry_timeout: u64,
    pub direct_mandatory_flag: bool,
    pub enable_cancel_on_failover: bool,
    pub kombu_compression: Option<String>,
    pub rabbit_login_method: String,
    pub rabbit_retry_interval: u64,
    pub rabbit_retry_backoff: u64,
    pub rabbit_interval_max: u64,
    pub ssl: bool,
    pub ssl_version: String,
    pub ssl_key_file: String,
    pub ssl_cert_file: String,
    pub ssl_ca_file: String,
}

impl RabbitOpts {
    /// Exchange `E` and topic queues are durable with either flag.
    pub fn durable(&self) -> bool {
        self.amqp_durable_queues || self.rabbit_quorum_queue
    }
}

/// `[metrics]`: our own group for the Prometheus/health endpoint.
#[derive(Debug, Clone)]
pub struct MetricsOpts {
    /// `listen`: address of `/metrics`, `/healthz`, `/readyz`; empty disables.
    pub listen: Option<SocketAddr>,
}

/// `[database]` (oslo.db options; the connection is a secret).
#[derive(Debug, Clone)]
pub struct DatabaseOpts {
    pub connection: Secret,
    pub max_pool_size: u32,
    pub max_overflow: u32,
    /// Seconds to wait for a pooled connection.
    pub pool_timeout: u64,
    pub connection_recycle_time: u64,
    /// Connection attempts at startup (-1: forever).
    pub max_retries: i64,
    pub retry_interval: u64,
    /// Deadlock retries of one transaction.
    pub db_max_retries: usize,
    pub db_retry_interval: f64,
    pub db_inc_retry_interval: bool,
    pub db_max_retry_interval: f64,
}

/// `[x509]` (magnum/conf/x509.py).
#[derive(Debug, Clone, PartialEq)]
pub struct X509Opts {
    pub allow_ca: bool,
    pub allowed_extensions: Vec<String>,
    pub allowed_key_usage: Vec<String>,
    /// Days.
    pub term_of_validity: i64,
    pub rsa_key_size: u32,
}

impl Default for X509Opts {
    fn default() -> Self {
        X509Opts {
            allow_ca: false,
            allowed_extensions: [
                "keyUsage",
                "extendedKeyUsage",
                "subjectAltName",
                "basicConstraints",
                "subjectKeyIdentifier",
            ]
            .map(String::from)
            .to_vec(),
            allowed_key_usage: ["Digital Signature", "Key Encipherment", "Non Repudiation"]
                .map(String::from)
                .to_vec(),
            term_of_validity: 365 * 5,
            rsa_key_size: 2048,
        }
    }
}

/// `[certificates] cert_manager_type`: where cluster certificates live
/// (Magnum's default is `barbican`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertManager {
    /// The `x509keypair` table: the one this conductor implements.
    X509Keypair,
    /// `barbican`, `local` or anything else: refused at startup.
    Unsupported(String),
}

impl CertManager {
    /// The startup check: a clear error for back ends we do not have.
    pub fn check(&self) -> Result<(), ConfigError> {
        match self {
            CertManager::X509Keypair => Ok(()),
            CertManager::Unsupported(name) => Err(ConfigError::Invalid {
                group: "certificates",
                name: "cert_manager_type",
                reason: format!(
                    "{name:?} is not supported yet by this conductor; use cert_manager_type = x509keypair"
                ),
            }),
        }
    }
}

/// Which CAPI API version to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapiVersion {
    /// Detect from the management cluster at startup.
    Auto,
    V1beta1,
    V1beta2,
}

/// `[capi]` (ours): the management cluster and what we put on it.
#[derive(Debug, Clone, PartialEq)]
pub struct CapiOpts {
    /// Path of the management cluster's kubeconfig (empty: `KUBECONFIG`,
    /// then in-cluster).
    pub kubeconfig: Option<String>,
    /// Namespace per project: `<prefix><project_id>`.
    pub namespace_prefix: String,
    pub api_version: CapiVersion,
    /// Addon charts: (repository, chart, version) per addon.
    pub calico_chart: (String, String, String),
    pub cilium_chart: (String, String, String),
    pub occm_chart: (String, String, String),
    pub cinder_csi_chart: (String, String, String),
    /// Seconds between full status resyncs (the safety net behind watches).
    pub resync_interval: u64,
    /// clouds.yaml `interface` for clusters' credentials.
    pub credentials_interface: String,
    /// clouds.yaml `verify`.
    pub verify_ca: bool,
    /// A CA bundle for the cloud's endpoints, given to clusters.
    pub ca_file: Option<String>,
    /// A shared application credential (test and demo deployments only,
    /// until per-cluster Keystone application credentials exist).
    pub static_auth_url: Option<String>,
    /// clouds.yaml `region_name` (empty: none).
    pub region_name: Option<String>,
    pub static_application_credential_id: Option<String>,
    pub static_application_credential_secret: Secret,
    /// Minutes an update (resize, upgrade, nodegroup change) may go without
    /// progress before it is `UPDATE_FAILED` (0: never).
    pub update_timeout: u64,
    /// The cluster-autoscaler image repository (tag by Kubernetes minor).
    pub autoscaler_image: String,
    /// Glance `os_distro` values this conductor builds clusters from (the
    /// same option the magnum-api driver hook reads from the same
    /// magnum.conf, so API and conductor agree on what is served).
    pub os_distros: Vec<String>,
    /// The other `magnum.drivers` entry points installed beside ours on
    /// the magnum-api hosts (k8s_capi_helm_v1, k8s_cluster_api_ubuntu...):
    /// which driver owns the clusters of a template without a `driver`
    /// (empty: only ours is installed).
    pub other_drivers: Vec<String>,
    /// Several conductors coordinate through Leases in the management
    /// cluster (false: a lone conductor, no Lease traffic).
    pub ha_leases: bool,
    /// How the status leader is chosen among several conductors: `amqp`
    /// (an exclusive queue on the broker they already share: no request to
    /// the management cluster at rest) or `lease` (a Lease there, renewed
    /// every third of `lease_duration`).
    pub leader_election: String,
    /// Namespace of the conductors' Leases (created if missing).
    pub lease_namespace: String,
    /// Seconds a Lease lives without renewal (a dead conductor's work is
    /// taken over after this long).
    pub lease_duration: u64,
}

/// Default of `[capi] os_distros`: images built by image-builder for
/// kubeadm with cloud-init.
pub const DEFAULT_OS_DISTROS: &[&str] = &["ubuntu", "rockylinux"];

/// `[keystone_auth]` (Magnum's group for its own Keystone credentials,
/// keystoneauth password plugin), each option falling back to
/// `[keystone_authtoken]` as Magnum's legacy path does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeystoneAuthOpts {
    pub auth_url: Option<String>,
    pub username: Option<String>,
    pub user_id: Option<String>,
    pub password: Secret,
    pub user_domain_id: Option<String>,
    pub user_domain_name: Option<String>,
    pub project_id: Option<String>,
    pub project_name: Option<String>,
    pub project_domain_id: Option<String>,
    pub project_domain_name: Option<String>,
    pub system_scope: Option<String>,
    pub cafile: Option<String>,
}

/// `[oslo_messaging_notifications]`, as oslo.messaging's notifier reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationOpts {
    /// `driver` (a MultiStrOpt; default none: nothing is sent): `messagingv2`
    /// (enveloped), `messaging` (v1), `noop`; others are refused at startup.
    pub drivers: Vec<String>,
    /// `topics` (default `notifications`): routing keys `<topic>.<priority>`.
    pub topics: Vec<String>,
    /// `transport_url`: Magnum publishes notifications on its RPC transport
    /// and ignores this; kept to say so at startup.
    pub transport_url: Option<Secret>,
}

/// The whole configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub default: DefaultOpts,
    pub keystone_auth: KeystoneAuthOpts,
    pub database: DatabaseOpts,
    pub x509: X509Opts,
    pub cert_manager: CertManager,
    pub capi: CapiOpts,
    pub conductor: ConductorOpts,
    pub rabbit: RabbitOpts,
    pub metrics: MetricsOpts,
    pub notifications: NotificationOpts,
    pub transport: TransportUrl,
    pub files: Vec<String>,
}

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
const KNOWN: &[(&str, &[&str])] = &[
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
            "resync_interval",
            "credentials_interface",
            "verify_ca",
            "ca_file",
            "static_auth_url",
            "region_name",
            "static_application_credential_id",
            "static_application_credential_secret",
            "update_timeout",
            "autoscaler_image",
            "os_distros",
            "other_drivers",
            "ha_leases",
            "leader_election",
            "lease_namespace",
            "lease_duration",
        ],
    ),
];

fn is_known(group: &str, key: &str) -> bool {
    KNOWN
        .iter()
        .any(|(g, keys)| *g == group && keys.contains(&key))
}

/// Typed reads of one group, with oslo.config's value syntax.
struct Group<'a> {
    layered: &'a Layered,
    name: &'static str,
    /// Values that win over the files (the transport URL query).
    overrides: Option<&'a std::collections::BTreeMap<String, String>>,
}

thread_local! {
    /// While [`sample`] runs: every option read, with its kind and default.
    static READS: std::cell::RefCell<Option<Vec<Read>>> = const { std::cell::RefCell::new(None) };
}

#[derive(Debug, Clone)]
struct Read {
    group: &'static str,
    name: &'static str,
    kind: &'static str,
    default: Option<String>,
}

fn record(group: &'static str, name: &'static str, kind: &'static str, default: Option<String>) {
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

/// `magnum-conductor config-sample`: every option this conductor reads, in
/// oslo-config-generator's sample format, with its default (as the code
/// reads it: recorded while parsing an empty configuration) and its help.
pub fn sample() -> String {
    READS.with(|r| *r.borrow_mut() = Some(Vec::new()));
    let _ = Config::from_text("");
    let reads = READS.with(|r| r.borrow_mut().take()).unwrap_or_default();
    let mut out = String::from(
        "# magnum-conductor (Rust) options, in oslo-config-generator's sample format.\n\
         # Generated by `magnum-conductor config-sample`; every option read is listed.\n",
    );
    for (group, keys) in KNOWN {
        out.push_str(&format!("\n[{group}]\n"));
        for key in keys.iter() {
            let read = reads.iter().find(|r| r.group == *group && r.name == *key);
            let kind = read.map(|r| r.kind).unwrap_or("string value");
            let default = read
                .and_then(|r| r.default.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| "<None>".into());
            let help = help::help(group, key).unwrap_or("(undocumented)");
            out.push_str(&format!("\n# {help} ({kind})\n#{key} = {default}\n"));
        }
    }
    out
}

impl Group<'_> {
    fn raw(&self, name: &'static str) -> Option<String> {
        record(self.name, name, "string value", None);
        if let Some(v) = self.overrides.and_then(|o| o.get(name)) {
            return Some(v.clone());
        }
        self.layered
            .get(self.name, name)
            .map(|v| interpolate(self.layered, self.name, v, 0))
    }
    fn invalid(&self, name: &'static str, reason: String) -> ConfigError {
        ConfigError::Invalid {
            group: self.name,
            name,
            reason,
        }
    }
    fn string(&self, name: &'static str, default: &str) -> String {
        record(self.name, name, "string value", Some(default.to_string()));
        self.raw(name).unwrap_or_else(|| default.to_string())
    }
    fn opt_string(&self, name: &'static str) -> Option<String> {
        self.raw(name).filter(|s| !s.is_empty())
    }
    /// An oslo.config ListOpt: comma-separated, items trimmed, empty items
    /// dropped.
    fn list(&self, name: &'static str, default: &[&str]) -> Vec<String> {
        record(self.name, name, "list value", Some(default.join(",")));
        match self.raw(name) {
            None => default.iter().map(|s| s.to_string()).collect(),
            Some(v) => v
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }
    fn boolean(&self, name: &'static str, default: bool) -> Result<bool, ConfigError> {
        record(self.name, name, "boolean value", Some(default.to_string()));
        match self.raw(name) {
            None => Ok(default),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "on" | "yes" => Ok(true),
                "false" | "0" | "off" | "no" => Ok(false),
                _ => Err(self.invalid(name, format!("{v:?} is not a boolean"))),
            },
        }
    }
    fn int(
        &self,
        name: &'static str,
        default: i64,
        min: Option<i64>,
        max: Option<i64>,
    ) -> Result<i64, ConfigError> {
        record(self.name, name, "integer value", Some(default.to_string()));
        let Some(v) = self.raw(name) else {
            return Ok(default);
        };
        let n: i64 = v
            .trim()
            .parse()
            .map_err(|_| self.invalid(name, format!("{v:?} is not an integer")))?;
        if let Some(lo) = min.filter(|lo| n < *lo) {
            return Err(self.invalid(name, format!("{n} is less than the minimum {lo}")));
        }
        if let Some(hi) = max.filter(|hi| n > *hi) {
            return Err(self.invalid(name, format!("{n} is greater than the maximum {hi}")));
        }
        Ok(n)
    }
    fn float(&self, name: &'static str, default: f64, min: f64) -> Result<f64, ConfigError> {
        record(
            self.name,
            name,
            "floating point value",
            Some(default.to_string()),
        );
        let Some(v) = self.raw(name) else {
            return Ok(default);
        };
        let n: f64 = v
            .trim()
            .parse()
            .map_err(|_| self.invalid(name, format!("{v:?} is not a number")))?;
        if !n.is_finite() || n < min {
            return Err(self.invalid(name, format!("{n} is less than the minimum {min}")));
        }
        Ok(n)
    }
    fn choice(
        &self,
        name: &'static str,
        default: &str,
        choices: &[&str],
    ) -> Result<String, ConfigError> {
        let v = self.string(name, default);
        if choices.contains(&v.as_str()) {
            Ok(v)
        } else {
            Err(self.invalid(name, format!("{v:?} is not one of {choices:?}")))
        }
    }
}

/// oslo.config's `$opt` / `${group.opt}` substitution against values set in
/// the files (`safe_substitute`: unknown names stay as written; `$$` and
/// `\$` are a literal `$`).
///
/// Bounded: references nested deeper than 8, or expanding the value past
/// [`MAX_INTERPOLATED`] bytes (`a = $b$b$b`, `b = $c$c$c`... grows
/// exponentially: found by fuzzing), are left as written, with a warning.
pub fn interpolate(layered: &Layered, group: &str, value: &str, depth: usize) -> String {
    let mut budget = MAX_INTERPOLATED;
    let out = expand(layered, group, value, depth, &mut budget);
    if budget == 0 {
        tracing::warn!(
            group,
            "a value's $-references expand past {MAX_INTERPOLATED} bytes: the rest is left unexpanded"
        );
    }
    out
}

/// The most an interpolated value may grow to.
pub const MAX_INTERPOLATED: usize = 64 * 1024;

fn expand(layered: &Layered, group: &str, value: &str, depth: usize, budget: &mut usize) -> String {
    if !value.contains('$') || depth > 8 || *budget == 0 {
        return value.to_string();
    }
    let value = value.replace("\\$", "$$");
    let mut out = String::with_capacity(value.len());
    let mut rest = value.as_str();
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
            continue;
        }
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => ("", 0),
            }
        } else {
            let len = after
                .char_indices()
                .take_while(|(i, c)| {
                    if *i == 0 {
                        c.is_ascii_alphabetic() || *c == '_'
                    } else {
                        c.is_ascii_alphanumeric() || *c == '_' || *c == '.'
                    }
                })
                .count();
            (&after[..len], len)
        };
        let valid = !name.is_empty()
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        let found = valid.then(|| lookup(layered, group, name)).flatten();
        match found {
            Some(v) if *budget > 0 => {
                let e = expand(layered, group, &v, depth + 1, budget);
                if e.len() > *budget {
                    // Over budget: this reference stays as written.
                    *budget = 0;
                    out.push('$');
                    rest = after;
                    continue;
                }
                *budget -= e.len();
                out.push_str(&e);
                rest = &after[consumed..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn lookup(layered: &Layered, group: &str, name: &str) -> Option<String> {
    if let Some((g, opt)) = name.split_once('.')
        && let Some(v) = layered.get(g, opt)
    {
        return Some(v.to_string());
    }
    layered
        .get(group, name)
        .or_else(|| layered.get("DEFAULT", name))
        .map(str::to_string)
}

fn system_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

fn process_name() -> String {
    std::env::args()
        .next()
        .and_then(|a| {
            std::path::Path::new(&a)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "magnum-conductor".to_string())
}

impl Config {
    /// Load `--config-file`s and `--config-dir`s.
    pub fn load(files: &[PathBuf], dirs: &[PathBuf]) -> Result<Config, ConfigError> {
        let layered = Layered::load(files, dirs)?;
        Config::from_layered(&layered)
    }

    /// Type the options of one configuration text (tests and tools).
    pub fn from_text(text: &str) -> Result<Config, ConfigError> {
        let mut l = Layered::default();
        l.push_text(std::path::Path::new("<text>"), text)
            .map_err(LoadError::Parse)?;
        Config::from_layered(&l)
    }

    /// Type the options of already-loaded files.
    pub fn from_layered(layered: &Layered) -> Result<Config, ConfigError> {
        for (group, key) in layered.keys() {
            if !is_known(&group, &key) {
                tracing::debug!(group = %group, option = %key, "option not used by this conductor, ignored");
            }
        }
        let d = Group {
            layered,
            name: "DEFAULT",
            overrides: None,
        };
        let transport_url = d.string("transport_url", "rabbit://");
        let transport = TransportUrl::parse(&transport_url)?;
        let default = DefaultOpts {
            transport_url: Secret::new(transport_url),
            host: d.opt_string("host"),
            control_exchange: d.string("control_exchange", "magnum"),
            rpc_response_timeout: d.int("rpc_response_timeout", 60, Some(1), None)? as u64,
            debug: d.boolean("debug", false)?,
            rpc_ping_enabled: d.boolean("rpc_ping_enabled", false)?,
            executor_thread_pool_size: d.int(
                "executor_thread_pool_size",
                64,
                Some(1),
                Some(100_000),
            )? as usize,
            periodic_interval_max: d.int("periodic_interval_max", 60, Some(1), None)? as u64,
            log_file: d.opt_string("log_file"),
            log_dir: d.opt_string("log_dir"),
            use_stderr: d.boolean("use_stderr", false)?,
            use_json: d.boolean("use_json", false)?,
            use_journal: d.boolean("use_journal", false)?,
            default_log_levels: d.list("default_log_levels", &[]),
        };
        let db = Group {
            layered,
            name: "database",
            overrides: None,
        };
        let database = DatabaseOpts {
            connection: Secret::new(db.string("connection", "")),
            max_pool_size: db.int("max_pool_size", 5, Some(0), Some(10_000))? as u32,
            max_overflow: db.int("max_overflow", 50, Some(0), Some(10_000))? as u32,
            pool_timeout: db.int("pool_timeout", 30, Some(1), None)? as u64,
            connection_recycle_time: db.int("connection_recycle_time", 3600, Some(1), None)? as u64,
            max_retries: db.int("max_retries", 10, Some(-1), None)?,
            retry_interval: db.int("retry_interval", 10, Some(0), None)? as u64,
            db_max_retries: db.int("db_max_retries", 20, Some(0), Some(1000))? as usize,
            db_retry_interval: db.float("db_retry_interval", 1.0, 0.0)?,
            db_inc_retry_interval: db.boolean("db_inc_retry_interval", true)?,
            db_max_retry_interval: db.float("db_max_retry_interval", 10.0, 0.0)?,
        };
        let c = Group {
            layered,
            name: "conductor",
            overrides: None,
        };
        let conductor = ConductorOpts {
            topic: c.string("topic", "magnum-conductor"),
            legacy_topic: c.opt_string("legacy_topic"),
            max_message_bytes: c.int("max_message_bytes", 128 << 20, Some(1024), None)? as usize,
        };
        if conductor.topic.is_empty() {
            return Err(ConfigError::Invalid {
                group: "conductor",
                name: "topic",
                reason: "must not be empty".into(),
            });
        }
        if conductor.legacy_topic.as_deref() == Some(conductor.topic.as_str()) {
            return Err(ConfigError::Invalid {
                group: "conductor",
                name: "legacy_topic",
                reason: "must differ from [conductor] topic (requests would come back here)".into(),
            });
        }
        let r = Group {
            layered,
            name: "oslo_messaging_rabbit",
            overrides: Some(&transport.query),
        };
        for key in transport.query.keys() {
            if !is_known("oslo_messaging_rabbit", key) {
                tracing::debug!(option = %key, "transport_url query parameter not used by this conductor, ignored");
            }
        }
        let missing_retry = match r.raw("kombu_missing_consumer_retry_timeout") {
            Some(_) => r.int("kombu_missing_consumer_retry_timeout", 60, Some(0), None)?,
            None => r.int("kombu_reconnect_timeout", 60, Some(0), None)?,
        };
        let rabbit = RabbitOpts {
            amqp_durable_queues: r.boolean("amqp_durable_queues", false)?,
            amqp_auto_delete: r.boolean("amqp_auto_delete", false)?,
            rabbit_ha_queues: r.boolean("rabbit_ha_queues", false)?,
            rabbit_quorum_queue: r.boolean("rabbit_quorum_queue", false)?,
            rabbit_transient_quorum_queue: r.boolean("rabbit_transient_quorum_queue", false)?,
            rabbit_quorum_delivery_limit: r.int(
                "rabbit_quorum_delivery_limit",
                0,
                Some(0),
                None,
            )?,
            rabbit_quorum_max_memory_length: r.int(
                "rabbit_quorum_max_memory_length",
                0,
                Some(0),
                None,
            )?,
            rabbit_quorum_max_memory_bytes: r.int(
                "rabbit_quorum_max_memory_bytes",
                0,
                Some(0),
                None,
            )?,
            rabbit_transient_queues_ttl: r.int(
                "rabbit_transient_queues_ttl",
                1800,
                Some(0),
                None,
            )?,
            rabbit_stream_fanout: r.boolean("rabbit_stream_fanout", false)?,
            use_queue_manager: r.boolean("use_queue_manager", false)?,
            hostname: r.opt_string("hostname").unwrap_or_else(system_hostname),
            processname: r.opt_string("processname").unwrap_or_else(process_name),
            rabbit_qos_prefetch_count: r.int(
                "rabbit_qos_prefetch_count",
                0,
                Some(0),
                Some(65535),
            )? as u16,
            heartbeat_timeout_threshold: r.int(
                "heartbeat_timeout_threshold",
                60,
                Some(0),
                Some(65535),
            )? as u16,
            heartbeat_rate: r.int("heartbeat_rate", 3, Some(1), None)? as u32,
            kombu_reconnect_delay: r.float("kombu_reconnect_delay", 1.0, 0.0)?,
            kombu_missing_consumer_retry_timeout: missing_retry as u64,
            direct_mandatory_flag: r.boolean("direct_mandatory_flag", true)?,
            enable_cancel_on_failover: r.boolean("enable_cancel_on_failover", false)?,
            kombu_compression: r.opt_string("kombu_compression"),
            rabbit_login_method: r.choice(
                "rabbit_login_method",
                "AMQPLAIN",
                &["PLAIN", "AMQPLAIN", "EXTERNAL", "RABBIT-CR-DEMO"],
            )?,
            rabbit_retry_interval: r.int("rabbit_retry_interval", 1, Some(1), None)? as u64,
            rabbit_retry_backoff: r.int("rabbit_retry_backoff", 2, Some(0), None)? as u64,
            rabbit_interval_max: r.int("rabbit_interval_max", 30, Some(1), None)? as u64,
            ssl: r.boolean("ssl", false)?,
            ssl_version: r.string("ssl_version", ""),
            ssl_key_file: r.string("ssl_key_file", ""),
            ssl_cert_file: r.string("ssl_cert_file", ""),
            ssl_ca_file: r.string("ssl_ca_file", ""),
        };
        // The same startup checks oslo.messaging makes.
        if rabbit.rabbit_quorum_queue && rabbit.rabbit_ha_queues {
            return Err(ConfigError::Conflict(
                "[oslo_messaging_rabbit] rabbit_quorum_queue and rabbit_ha_queues both enabled, queue type is quorum or HA (mirrored) not both".into(),
            ));
        }
        if rabbit.rabbit_stream_fanout && rabbit.rabbit_qos_prefetch_count == 0 {
            return Err(ConfigError::Conflict(
                "[oslo_messaging_rabbit] rabbit_stream_fanout needs rabbit_qos_prefetch_count to be set to a value greater than 0".into(),
            ));
        }
        if rabbit.rabbit_stream_fanout && !rabbit.rabbit_transient_quorum_queue {
            return Err(ConfigError::Conflict(
                "[oslo_messaging_rabbit] rabbit_stream_fanout needs rabbit_transient_quorum_queue to be set to true".into(),
            ));
        }
        if let Some(c) = &rabbit.kombu_compression
            && rpc_compression_supported(c).is_none()
        {
            return Err(ConfigError::Invalid {
                group: "oslo_messaging_rabbit",
                name: "kombu_compression",
                reason: format!("{c:?} is not supported (use gzip, bz2 or lzma)"),
            });
        }
        if !rabbit.ssl_version.is_empty()
            && !["tlsv1", "sslv23", "tlsv1_1", "tlsv1_2"]
                .contains(&rabbit.ssl_version.to_ascii_lowercase().as_str())
        {
            return Err(ConfigError::Invalid {
                group: "oslo_messaging_rabbit",
                name: "ssl_version",
                reason: format!("invalid SSL version {:?}", rabbit.ssl_version),
            });
        }
        let m = Group {
            layered,
            name: "metrics",
            overrides: None,
        };
        let listen = match m.raw("listen") {
            None => Some(SocketAddr::from(([127, 0, 0, 1], 9323))),
            Some(s) if s.trim().is_empty() => None,
            Some(s) => Some(s.trim().parse().map_err(|_| ConfigError::Invalid {
                group: "metrics",
                name: "listen",
                reason: format!("{s:?} is not an address:port"),
            })?),
        };
        let x = Group {
            layered,
            name: "x509",
            overrides: None,
        };
        let list = |name: &'static str, default: Vec<String>, choices: &[&str]| {
            let Some(raw) = x.raw(name) else {
                return Ok(default);
            };
            let items: Vec<String> = raw
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
            match items.iter().find(|i| !choices.contains(&i.as_str())) {
                Some(bad) => Err(ConfigError::Invalid {
                    group: "x509",
                    name,
                    reason: format!("{bad:?} is not one of {}", choices.join(", ")),
                }),
                None => Ok(items),
            }
        };
        let d509 = X509Opts::default();
        let x509 = X509Opts {
            allow_ca: x.boolean("allow_ca", false)?,
            allowed_extensions: list(
                "allowed_extensions",
                d509.allowed_extensions.clone(),
                &crate::certs::names::EXTENSION_NAMES
                    .iter()
                    .map(|(_, n)| *n)
                    .collect::<Vec<_>>(),
            )?,
            allowed_key_usage: list(
                "allowed_key_usage",
                d509.allowed_key_usage.clone(),
                &crate::certs::names::KEY_USAGE_NAMES,
            )?,
            term_of_validity: x.int("term_of_validity", 365 * 5, Some(1), Some(36500))?,
            rsa_key_size: {
                let bits = x.int("rsa_key_size", 2048, None, None)?;
                if ![2048, 3072, 4096, 8192].contains(&bits) {
                    return Err(ConfigError::Invalid {
                        group: "x509",
                        name: "rsa_key_size",
                        reason: format!(
                            "{bits}: this conductor generates 2048, 3072, 4096 or 8192-bit RSA keys"
                        ),
                    });
                }
                bits as u32
            },
        };
        let cm = Group {
            layered,
            name: "certificates",
            overrides: None,
        };
        let cert_manager = match cm.string("cert_manager_type", "barbican").trim() {
            "x509keypair" => CertManager::X509Keypair,
            other => CertManager::Unsupported(other.to_string()),
        };
        let cp = Group {
            layered,
            name: "capi",
            overrides: None,
        };
        let prefix = cp.string("namespace_prefix", "magnum-");
        if !prefix.is_empty()
            && !prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(ConfigError::Invalid {
                group: "capi",
                name: "namespace_prefix",
                reason: format!("{prefix:?} must be lowercase letters, digits and '-'"),
            });
        }
        let chart = |addon: &'static str, repo: &str, name: &str, version: &str| {
            let r = match addon {
                "calico" => ("calico_chart_repo", "calico_chart_version"),
                "cilium" => ("cilium_chart_repo", "cilium_chart_version"),
                "occm" => ("occm_chart_repo", "occm_chart_version"),
                _ => ("cinder_csi_chart_repo", "cinder_csi_chart_version"),
            };
            (
                cp.string(r.0, repo),
                name.to_string(),
                cp.string(r.1, version),
            )
        };
        let capi = CapiOpts {
            kubeconfig: cp.opt_string("kubeconfig"),
            namespace_prefix: prefix,
            api_version: match cp.string("api_version", "auto").trim() {
                "auto" => CapiVersion::Auto,
                "v1beta1" => CapiVersion::V1beta1,
                "v1beta2" => CapiVersion::V1beta2,
                other => {
                    return Err(ConfigError::Invalid {
                        group: "capi",
                        name: "api_version",
                        reason: format!("{other:?} is not auto, v1beta1 or v1beta2"),
                    });
                }
            },
            calico_chart: chart(
                "calico",
                "https://docs.tigera.io/calico/charts",
                "tigera-operator",
                "v3.29.1",
            ),
            cilium_chart: chart("cilium", "https://helm.cilium.io/", "cilium", "1.16.5"),
            occm_chart: chart(
                "occm",
                "https://kubernetes.github.io/cloud-provider-openstack",
                "openstack-cloud-controller-manager",
                "2.31.1",
            ),
            cinder_csi_chart: chart(
                "cinder_csi",
                "https://kubernetes.github.io/cloud-provider-openstack",
                "openstack-cinder-csi",
                "2.31.2",
            ),
            resync_interval: cp.int("resync_interval", 600, Some(30), None)? as u64,
            credentials_interface: cp.string("credentials_interface", "public"),
            verify_ca: cp.boolean("verify_ca", true)?,
            ca_file: cp.opt_string("ca_file"),
            static_auth_url: cp.opt_string("static_auth_url"),
            region_name: cp.opt_string("region_name"),
            static_application_credential_id: cp.opt_string("static_application_credential_id"),
            static_application_credential_secret: Secret::new(
                cp.string("static_application_credential_secret", ""),
            ),
            update_timeout: cp.int("update_timeout", 60, Some(0), None)? as u64,
            autoscaler_image: cp.string(
                "autoscaler_image",
                "registry.k8s.io/autoscaling/cluster-autoscaler",
            ),
            os_distros: cp.list("os_distros", DEFAULT_OS_DISTROS),
            other_drivers: cp.list("other_drivers", &[]),
            ha_leases: cp.boolean("ha_leases", true)?,
            leader_election: cp.choice("leader_election", "amqp", &["amqp", "lease"])?,
            lease_namespace: cp.string("lease_namespace", "magnum-system"),
            lease_duration: cp.int("lease_duration", 15, Some(5), Some(600))? as u64,
        };
        let ka = Group {
            layered,
            name: "keystone_auth",
            overrides: None,
        };
        let kt = Group {
            layered,
            name: "keystone_authtoken",
            overrides: None,
        };
        let k = |name: &'static str| ka.opt_string(name).or_else(|| kt.opt_string(name));
        let keystone_auth = KeystoneAuthOpts {
            auth_url: k("auth_url"),
            username: k("username"),
            user_id: k("user_id"),
            password: Secret::new(k("password").unwrap_or_default()),
            user_domain_id: k("user_domain_id"),
            user_domain_name: k("user_domain_name"),
            project_id: k("project_id"),
            project_name: k("project_name"),
            project_domain_id: k("project_domain_id"),
            project_domain_name: k("project_domain_name"),
            system_scope: k("system_scope"),
            cafile: k("cafile"),
        };
        Ok(Config {
            keystone_auth,
            default,
            database,
            x509,
            cert_manager,
            capi,
            conductor,
            rabbit,
            metrics: MetricsOpts { listen },
            notifications: {
                let g = Group {
                    layered,
                    name: "oslo_messaging_notifications",
                    overrides: None,
                };
                let drivers: Vec<String> = layered
                    .get_multi("oslo_messaging_notifications", "driver")
                    .iter()
                    .flat_map(|d| d.split(','))
                    .map(|d| d.trim().to_string())
                    .filter(|d| !d.is_empty())
                    .collect();
                for d in &drivers {
                    if !matches!(d.as_str(), "messagingv2" | "messaging" | "noop") {
                        return Err(ConfigError::Invalid {
                            group: "oslo_messaging_notifications",
                            name: "driver",
                            reason: format!(
                                "{d:?} is not supported (supported: messagingv2, messaging, noop)"
                            ),
                        });
                    }
                }
                let topics: Vec<String> = g
                    .string("topics", "notifications")
                    .split(',')
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
                    .collect();
                NotificationOpts {
                    drivers,
                    topics,
                    transport_url: g.opt_string("transport_url").map(Secret::new),
                }
            },
            transport,
            files: layered
                .file_names()
                .into_iter()
                .map(str::to_string)
                .collect(),
        })
    }
}

/// The compression names kombu accepts that we implement.
fn rpc_compression_supported(name: &str) -> Option<()> {
    matches!(name, "gzip" | "zlib" | "bz2" | "bzip2" | "lzma" | "xz").then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn conf(text: &str) -> Result<Config, ConfigError> {
        let mut l = Layered::default();
        l.push_text(Path::new("t.conf"), text)
            .map_err(LoadError::Parse)?;
        Config::from_layered(&l)
    }

    #[test]
    fn defaults_match_magnum_and_oslo() {
        let c = conf("[DEFAULT]\n").unwrap();
        assert_eq!(c.default.control_exchange, "magnum");
        assert_eq!(c.conductor.topic, "magnum-conductor");
        assert_eq!(c.default.rpc_response_timeout, 60);
        assert!(!c.rabbit.durable());
        assert_eq!(c.rabbit.rabbit_transient_queues_ttl, 1800);
        assert_eq!(c.rabbit.heartbeat_timeout_threshold, 60);
        assert_eq!(c.rabbit.kombu_missing_consumer_retry_timeout, 60);
        assert!(c.rabbit.direct_mandatory_flag);
        assert!(c.default.host.is_none());
    }

    #[test]
    fn capi_options() {
        let c = conf("[DEFAULT]\n").unwrap();
        assert_eq!(c.capi.namespace_prefix, "magnum-");
        assert_eq!(c.capi.api_version, CapiVersion::Auto);
        assert_eq!(c.capi.occm_chart.1, "openstack-cloud-controller-manager");
        let c = conf("[capi]\nkubeconfig = /etc/magnum/mgmt.kubeconfig\napi_version = v1beta2\noccm_chart_repo = https://mirror.local/cpo\n").unwrap();
        assert_eq!(
            c.capi.kubeconfig.as_deref(),
            Some("/etc/magnum/mgmt.kubeconfig")
        );
        assert_eq!(c.capi.api_version, CapiVersion::V1beta2);
        assert_eq!(c.capi.occm_chart.0, "https://mirror.local/cpo");
        assert!(
            conf("[capi]\napi_version = v1\n")
                .unwrap_err()
                .to_string()
                .contains("api_version")
        );
        assert!(
            conf("[capi]\nnamespace_prefix = Magnum_\n")
                .unwrap_err()
                .to_string()
                .contains("namespace_prefix")
        );
    }

    #[test]
    fn url_query_overrides_rabbit_options() {
        let c = conf(
            "[DEFAULT]\ntransport_url = rabbit://u:p@h:5672/?amqp_durable_queues=true&ssl=1\n[oslo_messaging_rabbit]\namqp_durable_queues = false\n",
        )
        .unwrap();
        assert!(c.rabbit.amqp_durable_queues && c.rabbit.ssl);
    }

    #[test]
    fn invalid_values_name_the_option() {
        let e = conf("[oslo_messaging_rabbit]\nrabbit_qos_prefetch_count = lots\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid value for [oslo_messaging_rabbit] rabbit_qos_prefetch_count: \"lots\" is not an integer"
        );
        let e = conf("[DEFAULT]\ndebug = maybe\n").unwrap_err().to_string();
        assert!(e.contains("[DEFAULT] debug"), "{e}");
        assert!(
            conf("[oslo_messaging_rabbit]\nrabbit_quorum_queue = true\nrabbit_ha_queues = true\n")
                .is_err()
        );
        assert!(conf("[oslo_messaging_rabbit]\nrabbit_stream_fanout = true\nrabbit_transient_quorum_queue = true\n").is_err());
        assert!(conf("[oslo_messaging_rabbit]\nkombu_compression = snappy\n").is_err());
        assert!(conf("[oslo_messaging_rabbit]\nrabbit_login_method = NTLM\n").is_err());
        assert!(conf("[metrics]\nlisten = nowhere\n").is_err());
        let e = conf("[capi]\nleader_election = zookeeper\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[capi] leader_election"), "{e}");
        assert_eq!(conf("").unwrap().capi.leader_election, "amqp");
        assert_eq!(
            conf("[capi]\nleader_election = lease\n")
                .unwrap()
                .capi
                .leader_election,
            "lease"
        );
    }

    #[test]
    fn unknown_options_are_fine_and_secrets_hidden() {
        let c = conf("[DEFAULT]\ntransport_url = rabbit://u:s3cr%23t@h/\nfoo = bar\n[keystone_authtoken]\npassword = x\n").unwrap();
        assert_eq!(
            c.transport.hosts[0].password.as_ref().unwrap().expose(),
            "s3cr#t"
        );
        assert!(!format!("{c:?}").contains("s3cr#t"));
    }

    #[test]
    fn interpolation() {
        let c = conf("[DEFAULT]\nmy_host = node7\nhost = $my_host\n[conductor]\ntopic = ${DEFAULT.my_host}-topic\n").unwrap();
        assert_eq!(c.default.host.as_deref(), Some("node7"));
        assert_eq!(c.conductor.topic, "node7-topic");
        let c = conf("[DEFAULT]\nhost = a$$b\\$c$unknown\n").unwrap();
        assert_eq!(c.default.host.as_deref(), Some("a$b$c$unknown"));
    }

    #[test]
    fn the_sample_lists_every_option_with_help_and_the_code_s_default() {
        let s = sample();
        for (group, keys) in KNOWN {
            assert!(s.contains(&format!("\n[{group}]\n")), "{group}");
            for k in keys.iter() {
                assert!(s.contains(&format!("\n#{k} = ")), "{group}.{k} missing");
                assert!(help::help(group, k).is_some(), "{group}.{k} has no help");
            }
        }
        for (g, k, _) in help::HELP {
            assert!(is_known(g, k), "help for an option not read: {g}.{k}");
        }
        assert!(!s.contains("(undocumented)"));
        // Defaults as the code reads them.
        for line in [
            "#rpc_response_timeout = 60",
            "#lease_duration = 15",
            "#ha_leases = true",
            "#os_distros = ubuntu,rockylinux",
            "#namespace_prefix = magnum-",
            "#transport_url = <None>",
        ] {
            assert!(s.contains(line), "{line}");
        }
        assert!(s.contains("# Seconds a Lease lives without renewal"));
        assert!(s.contains("(integer value)\n#lease_duration = 15"));
    }

    #[test]
    fn the_readme_table_names_every_option() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let missing: Vec<String> = KNOWN
            .iter()
            .flat_map(|(g, keys)| keys.iter().map(move |k| (*g, *k)))
            .filter(|(_, k)| {
                !readme.contains(&format!("`{k}`")) && !readme.contains(&format!("`{k} "))
            })
            .map(|(g, k)| format!("{g}.{k}"))
            .collect();
        assert!(missing.is_empty(), "README lacks {missing:?}");
    }

    #[test]
    fn interpolation_that_explodes_is_bounded() {
        // Each level references the next eight times: 8^8 copies of "x"
        // (16 MiB) unbounded. Found by the oslo_config fuzz target.
        let mut text = String::from("[DEFAULT]\n");
        for l in 0..8 {
            text.push_str(&format!("v{l} = {}\n", format!("$v{} ", l + 1).repeat(8)));
        }
        text.push_str("v8 = xx\nhost = $v0\n");
        let c = conf(&text).unwrap();
        let host = c.default.host.unwrap_or_default();
        assert!(host.len() <= MAX_INTERPOLATED + 64, "{} bytes", host.len());
        assert!(host.contains("$v"), "the rest is left as written");
    }

    #[test]
    fn metrics_listen() {
        assert_eq!(
            conf("[metrics]\nlisten = 0.0.0.0:9999\n")
                .unwrap()
                .metrics
                .listen
                .unwrap()
                .port(),
            9999
        );
        assert!(
            conf("[metrics]\nlisten =\n")
                .unwrap()
                .metrics
                .listen
                .is_none()
        );
    }
}
