//! Prometheus metrics of the conductor (prefix `magnum_conductor_`).
//!
//! Labels are bounded: `method` is a known method name or `unknown`,
//! `kind` is `call`/`cast`, `outcome` and `reason` are fixed words.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// All metrics, registered once per process.
#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// RPC messages handled, by method, kind and outcome (`ok`, `failure`, `duplicate`).
    pub rpc_messages: IntCounterVec,
    /// Messages refused before dispatch, by reason (`not_json`, `envelope_version`, ...).
    pub rpc_rejected: IntCounterVec,
    /// Time from receipt to reply (calls) or handler completion (casts).
    pub rpc_duration: HistogramVec,
    /// Requests being handled now.
    pub rpc_inflight: IntGauge,
    /// Casts received and waiting for a handler slot.
    pub rpc_waiting_casts: IntGauge,
    /// Deliveries the broker flagged as redelivered.
    pub rpc_redeliveries: IntCounter,
    /// Replies, by outcome (`sent`, `queue_gone`, `error`) and type (`final`, `heartbeat`).
    pub rpc_replies: IntCounterVec,
    /// 1 while consuming from the broker.
    pub amqp_connected: IntGauge,
    /// Connections (re)established after the first one.
    pub amqp_reconnects: IntCounter,
    /// Failed connection attempts.
    pub amqp_connect_failures: IntCounter,
    /// `build_info{version,revision}` = 1.
    pub build_info: IntGaugeVec,
    /// Time to decode an AMQP body into a request.
    pub decode_duration: Histogram,
    /// `magnum_service` heartbeats, by outcome (`ok`, `error`).
    pub db_heartbeats: IntCounterVec,
    /// Cluster operations, by operation (`create`, `delete`) and outcome
    /// (`started`, `failed`, `resumed`, `complete`).
    pub cluster_operations: IntCounterVec,
    /// Passes of the status worker that wrote to the DB.
    pub status_writes: IntCounter,
    /// CADF notifications by event type and outcome (queued, dropped, sent, retried).
    pub notifications: IntCounterVec,
    /// Passes of the status worker that failed (retried at the next event or resync).
    pub status_errors: IntCounter,
    /// Watch events received, by kind.
    pub watch_events: IntCounterVec,
    /// Watch errors (the watch retries with backoff), by kind.
    pub watch_errors: IntCounterVec,
    /// 1 while this process is the status leader.
    pub leader: IntGauge,
    /// Operations that could not have their cluster's Lease in time, by operation.
    pub lease_busy: IntCounterVec,
    /// Requests and status passes that met a cluster of another driver and
    /// left it alone, by what met it (an RPC method, `status`, `resume`)
    /// and the driver (`unknown`: nobody's, or not created here).
    pub foreign_clusters: IntCounterVec,
    /// Requests republished to `[conductor] legacy_topic`, by method, the
    /// cluster's driver and outcome (`forwarded`, `failed`).
    pub rpc_forwarded: IntCounterVec,
    /// Cluster Leases taken over from a conductor that stopped renewing them.
    pub lease_takeovers: IntCounter,
    /// What deleting clusters' clean-ups asked OpenStack to delete, by kind
    /// (`load_balancer`, `floating_ip`, `security_group`, `snapshot`,
    /// `volume`) and outcome (`requested`, `failed`).
    pub cloud_deletions: IntCounterVec,
    /// Deleting clusters whose clean-up waits on OpenStack now.
    pub cloud_cleanup_waiting: IntGauge,
    /// Clean-up listings that failed, by service and whether they held the
    /// clean-up up (`blocking`: a service the cluster uses) or not
    /// (`ignored`).
    pub cloud_list_failures: IntCounterVec,
    /// Times this process stopped leading, by reason (`broker`: the
    /// connection owning the leader queue ended; `apiserver`: it stepped
    /// down, cut off from the management cluster).
    pub leader_stepdowns: IntCounterVec,
    /// Status passes put off because the cluster was busy here or elsewhere.
    pub status_deferred: IntCounter,
    /// Times the status-kick queue was full (the worker then does a full pass).
    pub kick_overflows: IntCounter,
    /// Seconds from an operation's start to its end (create: from the row's
    /// `created_at`; update: from when the status leader first saw it), by
    /// operation and outcome (`complete`, `failed`).
    pub operation_duration: HistogramVec,
    /// Magnum clusters by status (the status leader exports it; others 0 series).
    pub clusters: IntGaugeVec,
    /// Seconds since the least recently changed `*_IN_PROGRESS` cluster row
    /// changed (0: none in progress; the leader exports it).
    pub oldest_in_progress: IntGauge,
    /// Objects in the status cache, by kind.
    pub cache_objects: IntGaugeVec,
    /// Bytes of the status cache's projected objects, by kind.
    pub cache_bytes: IntGaugeVec,
    /// Seconds the last full status pass (startup, relist, resync) took.
    pub full_pass_seconds: prometheus::Gauge,
    /// Full status passes completed.
    pub full_passes: IntCounter,
    /// The allocator's heap when scraped: `in_use` (what the process holds)
    /// and `free` (freed, kept by the allocator, not yet given back; glibc).
    pub heap_bytes: IntGaugeVec,
}

fn reg<T: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: T) -> T {
    // Names are unique constants, so registration cannot collide.
    if let Err(e) = r.register(Box::new(c.clone())) {
        tracing::error!(error = %e, "metric registration failed");
    }
    c
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry =
            Registry::new_custom(Some("magnum_conductor".into()), None).unwrap_or_default();
        #[cfg(target_os = "linux")]
        {
            let pc = prometheus::process_collector::ProcessCollector::for_self();
            // The process collector uses the default `process_` names.
            let _ = prometheus::default_registry().register(Box::new(pc));
        }
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels)
                .unwrap_or_else(|_| unreachable_metric())
        };
        let m = Metrics {
            rpc_messages: reg(
                &registry,
                counter_vec(
                    "rpc_messages_total",
                    "RPC messages handled, by method, kind and outcome.",
                    &["method", "kind", "outcome"],
                ),
            ),
            rpc_rejected: reg(
                &registry,
                counter_vec(
                    "rpc_rejected_total",
                    "RPC messages refused before dispatch, by reason.",
                    &["reason", "kind"],
                ),
            ),
            rpc_duration: reg(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "rpc_handle_duration_seconds",
                        "Time to handle an RPC request.",
                    )
                    .buckets(vec![
                        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                        5.0, 10.0, 30.0, 60.0,
                    ]),
                    &["method"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            rpc_inflight: reg(
                &registry,
                IntGauge::new("rpc_inflight", "RPC requests being handled.")
                    .unwrap_or_else(|_| unreachable_metric()),
            ),
            rpc_waiting_casts: reg(
                &registry,
                IntGauge::new(
                    "rpc_waiting_casts",
                    "Casts received and waiting for a handler slot.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            rpc_redeliveries: reg(
                &registry,
                IntCounter::new(
                    "rpc_redeliveries_total",
                    "Deliveries flagged as redelivered by the broker.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            rpc_replies: reg(
                &registry,
                counter_vec(
                    "rpc_replies_total",
                    "Replies to calls.",
                    &["outcome", "type"],
                ),
            ),
            amqp_connected: reg(
                &registry,
                IntGauge::new(
                    "amqp_connected",
                    "1 while connected to the broker and consuming.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            amqp_reconnects: reg(
                &registry,
                IntCounter::new(
                    "amqp_reconnects_total",
                    "Broker connections re-established.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            amqp_connect_failures: reg(
                &registry,
                IntCounter::new(
                    "amqp_connect_failures_total",
                    "Failed broker connection attempts.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            build_info: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new("build_info", "Build information."),
                    &["version", "revision"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            decode_duration: reg(
                &registry,
                Histogram::with_opts(
                    HistogramOpts::new(
                        "rpc_decode_duration_seconds",
                        "Time to decode an AMQP body.",
                    )
                    .buckets(vec![
                        0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5,
                    ]),
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            db_heartbeats: reg(
                &registry,
                counter_vec(
                    "db_heartbeats_total",
                    "magnum_service heartbeats written.",
                    &["outcome"],
                ),
            ),
            cluster_operations: reg(
                &registry,
                counter_vec(
                    "cluster_operations_total",
                    "Cluster operations, by operation and outcome.",
                    &["operation", "outcome"],
                ),
            ),
            notifications: reg(
                &registry,
                counter_vec(
                    "notifications_total",
                    "CADF notifications, by event type and outcome (queued, dropped; sent and retried count all).",
                    &["event", "outcome"],
                ),
            ),
            status_writes: reg(
                &registry,
                IntCounter::new(
                    "status_writes_total",
                    "Status passes that changed Magnum rows.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            status_errors: reg(
                &registry,
                IntCounter::new("status_errors_total", "Status passes that failed.")
                    .unwrap_or_else(|_| unreachable_metric()),
            ),
            watch_events: reg(
                &registry,
                counter_vec(
                    "watch_events_total",
                    "Management-cluster watch events, by kind.",
                    &["kind"],
                ),
            ),
            watch_errors: reg(
                &registry,
                counter_vec(
                    "watch_errors_total",
                    "Management-cluster watch errors, by kind.",
                    &["kind"],
                ),
            ),
            leader: reg(
                &registry,
                IntGauge::new("leader", "1 while this conductor is the status leader.")
                    .unwrap_or_else(|_| unreachable_metric()),
            ),
            lease_busy: reg(
                &registry,
                counter_vec(
                    "lease_busy_total",
                    "Operations that could not have their cluster's Lease in time (requeued or refused).",
                    &["operation"],
                ),
            ),
            foreign_clusters: reg(
                &registry,
                counter_vec(
                    "foreign_cluster_skips_total",
                    "Requests and status passes that left a cluster of another driver untouched.",
                    &["what", "driver"],
                ),
            ),
            rpc_forwarded: reg(
                &registry,
                counter_vec(
                    "rpc_forwarded_total",
                    "Requests about other drivers' clusters republished to [conductor] legacy_topic.",
                    &["method", "driver", "outcome"],
                ),
            ),
            cloud_deletions: reg(
                &registry,
                counter_vec(
                    "cloud_deletions_total",
                    "What deleting clusters' clean-ups asked OpenStack to delete, by kind and outcome.",
                    &["kind", "outcome"],
                ),
            ),
            cloud_list_failures: reg(
                &registry,
                counter_vec(
                    "cloud_list_failures_total",
                    "Deleting clusters' clean-up listings that failed, by service and effect (blocking: a service the cluster uses; ignored: one it cannot have used).",
                    &["service", "effect"],
                ),
            ),
            cloud_cleanup_waiting: reg(
                &registry,
                IntGauge::new(
                    "cloud_cleanup_waiting",
                    "Deleting clusters whose clean-up waits on OpenStack (load balancers, volumes...).",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            lease_takeovers: reg(
                &registry,
                IntCounter::new(
                    "lease_takeovers_total",
                    "Cluster Leases taken over from a conductor that stopped renewing them.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            leader_stepdowns: reg(
                &registry,
                counter_vec(
                    "leader_stepdowns_total",
                    "Times this conductor stopped leading under the broker election, by reason (broker, apiserver).",
                    &["reason"],
                ),
            ),
            status_deferred: reg(
                &registry,
                IntCounter::new(
                    "status_deferred_total",
                    "Status passes put off because an operation held the cluster.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            kick_overflows: reg(
                &registry,
                IntCounter::new(
                    "kick_queue_overflows_total",
                    "Times the status-kick queue was full (a full pass follows; nothing is lost).",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            operation_duration: reg(
                &registry,
                HistogramVec::new(
                    HistogramOpts::new(
                        "cluster_operation_duration_seconds",
                        "Seconds from a cluster operation's start to COMPLETE or FAILED (create: from created_at; update: from the status leader first seeing it).",
                    )
                    .buckets(vec![10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0]),
                    &["operation", "outcome"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            clusters: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new("clusters", "Magnum clusters by status (exported by the status leader)."),
                    &["status"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            oldest_in_progress: reg(
                &registry,
                IntGauge::new(
                    "cluster_oldest_in_progress_seconds",
                    "Seconds since the least recently changed *_IN_PROGRESS cluster row changed (status leader).",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            cache_objects: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new("status_cache_objects", "Objects in the status cache, by kind."),
                    &["kind"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            cache_bytes: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "status_cache_bytes",
                        "Bytes of the projected objects in the status cache, by kind.",
                    ),
                    &["kind"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            full_pass_seconds: reg(
                &registry,
                prometheus::Gauge::new(
                    "status_full_pass_seconds",
                    "Seconds the last full status pass (startup, relist, resync) took.",
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            full_passes: reg(
                &registry,
                IntCounter::new("status_full_passes_total", "Full status passes completed.")
                    .unwrap_or_else(|_| unreachable_metric()),
            ),
            heap_bytes: reg(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "heap_bytes",
                        "The allocator's heap: in_use, or free (freed and kept by the allocator).",
                    ),
                    &["state"],
                )
                .unwrap_or_else(|_| unreachable_metric()),
            ),
            registry,
        };
        m.build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                option_env!("MAGNUM_CONDUCTOR_REVISION").unwrap_or("unknown"),
            ])
            .set(1);
        m.init_known();
        m
    }

    /// Export every label set known in advance at 0, so a series exists
    /// from the start: `increase()` sees its first event, dashboards show
    /// 0 rather than "No data" (Prometheus' instrumentation guidance).
    /// Watch kinds are added when their watches start.
    fn init_known(&self) {
        for kind in [
            "load_balancer",
            "floating_ip",
            "security_group",
            "snapshot",
            "backup",
            "volume_attachment",
            "volume",
        ] {
            for outcome in ["requested", "failed"] {
                self.cloud_deletions.with_label_values(&[kind, outcome]);
            }
        }
        use rpc_schema::methods::{METHODS, Usage};
        for spec in METHODS {
            let kinds: &[&str] = match spec.usage {
                Usage::Call => &["call"],
                Usage::Cast => &["cast"],
                Usage::Both => &["call", "cast"],
            };
            for kind in kinds {
                for outcome in ["ok", "failure"] {
                    self.rpc_messages
                        .with_label_values(&[spec.name, kind, outcome]);
                }
                if *kind == "cast" {
                    self.rpc_messages
                        .with_label_values(&[spec.name, kind, "requeued"]);
                }
            }
            self.rpc_duration.with_label_values(&[spec.name]);
        }
        for op in OPERATIONS {
            for outcome in ["started", "failed"] {
                self.cluster_operations.with_label_values(&[op, outcome]);
            }
            self.lease_busy.with_label_values(&[op]);
        }
        for op in ["create", "update"] {
            for outcome in ["complete", "failed"] {
                self.operation_duration.with_label_values(&[op, outcome]);
            }
        }
        self.zero_clusters();
    }

    /// `clusters{status}` at 0 for every status Magnum has (what a
    /// conductor that is not the status leader exports).
    pub fn zero_clusters(&self) {
        self.clusters.reset();
        for s in rpc_schema::ovo::CLUSTER_STATUS {
            self.clusters.with_label_values(&[s]).set(0);
        }
    }

    /// A watch of `kind` started: its series exist from now on.
    pub fn watch_started(&self, kind: &str) {
        self.watch_events.with_label_values(&[kind]);
        self.watch_errors.with_label_values(&[kind]);
    }

    /// The text exposition of our metrics plus the process metrics.
    pub fn render(&self) -> String {
        let mut families = self.registry.gather();
        families.extend(prometheus::default_registry().gather());
        let mut buf = Vec::new();
        if TextEncoder::new().encode(&families, &mut buf).is_err() {
            return String::new();
        }
        String::from_utf8(buf).unwrap_or_default()
    }
}

/// The `operation` label of cluster operations (`lifecycle::runner::Op::name`).
pub const OPERATIONS: [&str; 9] = [
    "create",
    "delete",
    "update",
    "resize",
    "upgrade",
    "nodegroup_create",
    "nodegroup_update",
    "nodegroup_delete",
    "credential_rotate",
];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// Metric constructors only fail on invalid names or label sets, which are
/// compile-time constants here; reaching this is a programming error caught
/// by the unit test below.
fn unreachable_metric<T>() -> T {
    panic!("invalid metric definition")
}

/// The label for a method name taken from the wire.
pub fn method_label(method: Option<&str>) -> &'static str {
    match method {
        Some(rpc_schema::methods::PING_METHOD) => rpc_schema::methods::PING_METHOD,
        Some(m) => rpc_schema::methods::method(m).map_or("unknown", |s| s.name),
        None => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_renders() {
        let m = Metrics::new();
        m.rpc_messages
            .with_label_values(&["ping_conductor", "call", "ok"])
            .inc();
        let text = m.render();
        assert!(text.contains("magnum_conductor_rpc_messages_total{kind=\"call\",method=\"ping_conductor\",outcome=\"ok\"} 1"));
        assert!(text.contains("magnum_conductor_build_info"));
        assert_eq!(method_label(Some("drop table")), "unknown");
        assert_eq!(method_label(Some("cluster_create")), "cluster_create");
    }
}
