//! The conductor's configuration, read from magnum.conf the way oslo.config
//! reads it (see [`ini`]), typed with Magnum's and oslo.messaging's
//! defaults for every option this conductor uses.
//!
//! Options the conductor does not read (magnum.conf is shared with
//! magnum-api) are ignored with a debug log. An option that is set but
//! invalid is a startup error naming `[group] option`.

mod group;
pub mod help;
pub mod ini;
mod known;
pub mod reference;

use group::Group;
pub use group::{MAX_INTERPOLATED, interpolate};
use known::is_known;
pub use known::{OptionDoc, documented, sample};

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
    /// The addons labels ask for (issue 32): metrics-server
    /// (`metrics_server_enabled`), ingress-nginx (`ingress_controller=nginx`),
    /// kube-prometheus-stack (`monitoring_enabled`).
    pub metrics_server_chart: (String, String, String),
    pub ingress_nginx_chart: (String, String, String),
    pub monitoring_chart: (String, String, String),
    /// Manila CSI (`manila_csi_enabled`) and the NFS CSI node plugin it
    /// forwards NFS shares to.
    pub manila_csi_chart: (String, String, String),
    pub nfs_csi_chart: (String, String, String),
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
    /// Before CAPO deletes a cluster's network, delete what its workload
    /// cluster made in OpenStack (OCCM's load balancers, floating IPs and
    /// security groups; Cinder CSI's volumes and snapshots, by the
    /// cluster's `volumes_policy` label), with the cluster's application
    /// credential.
    pub cloud_cleanup: bool,
    /// Seconds the clean-up may wait on OpenStack (from the start of the
    /// OpenStackCluster's deletion) before the cluster is `DELETE_FAILED`
    /// (the finalizer still holds the network; a new delete retries).
    pub cloud_cleanup_timeout: u64,
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
    /// Clusters without an API floating IP are reached through
    /// `magnum-capi-proxy` on the network hosts (a Service, the proxy's
    /// name in the kubeconfig CAPI reads and in the API certificate).
    /// False: CAPI dials their private address (the management cluster
    /// routes to tenant networks).
    pub api_proxy: bool,
    /// What a create does with a label no list of the conductor's names:
    /// `warn` (ignored, named in the cluster's `status_reason`) or `error`
    /// (the create fails naming it).
    pub unknown_labels: String,
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
                "metrics_server" => ("metrics_server_chart_repo", "metrics_server_chart_version"),
                "ingress_nginx" => ("ingress_nginx_chart_repo", "ingress_nginx_chart_version"),
                "monitoring" => ("monitoring_chart_repo", "monitoring_chart_version"),
                "manila_csi" => ("manila_csi_chart_repo", "manila_csi_chart_version"),
                "nfs_csi" => ("nfs_csi_chart_repo", "nfs_csi_chart_version"),
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
            metrics_server_chart: chart(
                "metrics_server",
                "https://kubernetes-sigs.github.io/metrics-server/",
                "metrics-server",
                "3.12.2",
            ),
            ingress_nginx_chart: chart(
                "ingress_nginx",
                "https://kubernetes.github.io/ingress-nginx",
                "ingress-nginx",
                "4.11.3",
            ),
            monitoring_chart: chart(
                "monitoring",
                "https://prometheus-community.github.io/helm-charts",
                "kube-prometheus-stack",
                "66.3.1",
            ),
            manila_csi_chart: chart(
                "manila_csi",
                "https://kubernetes.github.io/cloud-provider-openstack",
                "openstack-manila-csi",
                "2.32.0",
            ),
            nfs_csi_chart: chart(
                "nfs_csi",
                "https://raw.githubusercontent.com/kubernetes-csi/csi-driver-nfs/master/charts",
                "csi-driver-nfs",
                "v4.9.0",
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
            cloud_cleanup: cp.boolean("cloud_cleanup", true)?,
            cloud_cleanup_timeout: cp.int("cloud_cleanup_timeout", 1800, Some(10), None)? as u64,
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
            api_proxy: cp.boolean("api_proxy", true)?,
            unknown_labels: cp.choice("unknown_labels", "warn", &["warn", "error"])?,
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
mod tests;
