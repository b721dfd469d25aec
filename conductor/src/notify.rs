//! Magnum's CADF notifications (`magnum.cluster.{create,update,delete}`).
//!
//! Magnum's conductor calls `notify_about_cluster_operation` at fixed points:
//! pending when an operation starts, failure when it is refused or fails,
//! and success/failure when the status sync sees it end. This module builds
//! the same message (pure: [`cadf_event`], [`message`], [`body`]) and
//! publishes it as oslo.messaging's notifier does on the RPC transport
//! (Magnum builds its Notifier on the RPC transport; `[oslo_messaging_notifications]
//! transport_url` is ignored there too): exchange `control_exchange` (topic),
//! routing key `<topic>.<priority>` for each `topics` entry, a queue of that
//! name declared and bound first (so nothing is lost before a consumer
//! exists), `messagingv2` enveloped like RPC, `messaging` not. `noop` or no
//! driver (Magnum's default) sends nothing.
//!
//! Publishing never blocks an operation: messages go through a bounded
//! queue to one task (so their order is kept), which waits for the broker
//! while it is away; a full queue drops the newest with a log line and
//! `notifications_total{outcome="dropped"}`.

use std::collections::HashSet;
use std::sync::Arc;

use amq_protocol::types::FieldTable;
use common::config::Config;
use rpc_schema::RequestContext;
use rpc_schema::ovo::MagnumObject;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, watch};

use crate::amqp::client::{
    BasicPublishOptions, Channel, Connection, Error as AmqpError, ExchangeDeclareOptions,
    ExchangeKind, QueueDeclareOptions,
};
use crate::metrics::Metrics;

/// How many notifications may wait for the broker.
const QUEUE: usize = 10_000;

/// CADF actions Magnum notifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Delete,
}

impl Action {
    pub fn word(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }

    /// The action of a status the status sync reports
    /// (`ClusterUpdateJob.status_to_event`).
    pub fn of_status(status: &str) -> Option<Action> {
        Some(match status {
            "CREATE_COMPLETE" | "CREATE_FAILED" => Action::Create,
            "UPDATE_COMPLETE" | "UPDATE_FAILED" | "ROLLBACK_COMPLETE" | "ROLLBACK_FAILED" => {
                Action::Update
            }
            "DELETE_COMPLETE" | "DELETE_FAILED" => Action::Delete,
            _ => return None,
        })
    }
}

/// CADF outcomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Success,
    Failure,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Pending => "pending",
            Outcome::Success => "success",
            Outcome::Failure => "failure",
        }
    }
    /// `notifier.error` for failures, `notifier.info` otherwise.
    pub fn priority(self) -> &'static str {
        if self == Outcome::Failure {
            "ERROR"
        } else {
            "INFO"
        }
    }
}

/// `"2025-03-04T10:20:30.000000"` (what `jsonutils.to_primitive` makes of
/// a naive datetime), from our `"2025-03-04T10:20:30+00:00"`.
fn python_time(v: Option<&Value>) -> Value {
    match v.and_then(Value::as_str) {
        Some(s) => match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(t) => json!(t.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string()),
            Err(_) => json!(s),
        },
        None => Value::Null,
    }
}

/// `cluster_data`: the attachment Magnum puts on the target (its keys,
/// including `docker_volume_size:` with the colon).
pub fn cluster_data(cluster: &MagnumObject, nodegroups: &[MagnumObject]) -> Value {
    let g = |f: &str| cluster.get(f).cloned().unwrap_or(Value::Null);
    let (masters, workers): (Vec<&MagnumObject>, Vec<&MagnumObject>) = nodegroups
        .iter()
        .partition(|n| n.get_str("role") == Some("master"));
    let count = |ngs: &[&MagnumObject]| {
        ngs.iter()
            .map(|n| n.get_i64("node_count").unwrap_or(0))
            .sum::<i64>()
    };
    let addresses = |ngs: &[&MagnumObject]| {
        ngs.iter()
            .flat_map(|n| {
                n.get("node_addresses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .collect::<Vec<Value>>()
    };
    json!({
        "status": g("status"),
        "status_reason": g("status_reason"),
        "project_id": g("project_id"),
        "created_at": python_time(cluster.get("created_at")),
        "updated_at": python_time(cluster.get("updated_at")),
        "cluster_template_id": g("cluster_template_id"),
        "keypair": g("keypair"),
        "docker_volume_size:": g("docker_volume_size"),
        "labels": g("labels"),
        "master_flavor_id": g("master_flavor_id"),
        "flavor_id": g("flavor_id"),
        "stack_id": g("stack_id"),
        "health_status": g("health_status"),
        "create_timeout": g("create_timeout"),
        "api_address": g("api_address"),
        "discovery_url": g("discovery_url"),
        "node_addresses": addresses(&workers),
        "master_addresses": addresses(&masters),
        "node_count": count(&workers),
        "master_count": count(&masters),
    })
}

/// Ids and the time of one event (random in production, fixed in tests).
#[derive(Debug, Clone)]
pub struct Stamp {
    pub event_id: String,
    pub initiator_id: String,
    pub observer_id: String,
    pub message_id: String,
    pub unique_id: String,
    pub now: chrono::DateTime<chrono::Utc>,
}

impl Stamp {
    pub fn new() -> Stamp {
        let u = || uuid::Uuid::new_v4().to_string();
        Stamp {
            event_id: u(),
            initiator_id: u(),
            observer_id: u(),
            message_id: u(),
            unique_id: uuid::Uuid::new_v4().simple().to_string(),
            now: chrono::Utc::now(),
        }
    }
}

impl Default for Stamp {
    fn default() -> Self {
        Stamp::new()
    }
}

/// The CADF event (pycadf `Event.as_dict()`) Magnum sends as the payload.
/// `ctx`: the request's context (None: the status sync's admin context).
pub fn cadf_event(
    action: Action,
    outcome: Outcome,
    ctx: Option<&RequestContext>,
    cluster: Option<(&MagnumObject, &[MagnumObject])>,
    stamp: &Stamp,
) -> Value {
    let mut initiator =
        json!({"id": stamp.initiator_id, "typeURI": "service/security/account/user"});
    if let Some(c) = ctx {
        if let Some(u) = c.user_id().filter(|s| !s.is_empty()) {
            initiator["user_id"] = json!(u);
        }
        if let Some(p) = c.project_id().filter(|s| !s.is_empty()) {
            initiator["project_id"] = json!(p);
        }
        if let Some(d) = c
            .raw()
            .get("domain_id")
            .or_else(|| c.raw().get("domain"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            initiator["domain_id"] = json!(d);
        }
    }
    let target = match cluster {
        Some((c, ngs)) => json!({
            "id": c.get_str("uuid"),
            "typeURI": "service/magnum/cluster",
            "name": c.get_str("name"),
            "attachments": [{"typeURI": "service/magnum/cluster", "content": cluster_data(c, ngs),
                             "name": "cluster_data"}],
        }),
        None => {
            json!({"id": uuid::Uuid::new_v4().to_string(), "typeURI": "service/magnum/cluster"})
        }
    };
    json!({
        "typeURI": "http://schemas.dmtf.org/cloud/audit/1.0/event",
        "eventType": "activity",
        "id": stamp.event_id,
        "eventTime": stamp.now.format("%Y-%m-%dT%H:%M:%S%.6f+0000").to_string(),
        "action": action.word(),
        "outcome": outcome.word(),
        "observer": {"id": stamp.observer_id, "typeURI": "service/magnum/cluster"},
        "initiator": initiator,
        "target": target,
    })
}

/// The notification message (before the envelope): oslo's fields, the
/// `_unique_id`, and the context as `_context_*` keys with its token and
/// auth URL left out, as oslo.messaging redacts a notification's context.
pub fn message(
    publisher_id: &str,
    action: Action,
    outcome: Outcome,
    payload: Value,
    ctx: Option<&RequestContext>,
    stamp: &Stamp,
) -> Value {
    let mut m = Map::new();
    m.insert("message_id".into(), json!(stamp.message_id));
    m.insert("publisher_id".into(), json!(publisher_id));
    m.insert(
        "event_type".into(),
        json!(format!("magnum.cluster.{}", action.word())),
    );
    m.insert("priority".into(), json!(outcome.priority()));
    m.insert("payload".into(), payload);
    m.insert(
        "timestamp".into(),
        json!(stamp.now.format("%Y-%m-%d %H:%M:%S%.6f").to_string()),
    );
    m.insert("_unique_id".into(), json!(stamp.unique_id));
    // The status sync notifies with Magnum's `make_admin_context(all_tenants=True)`,
    // whose `to_dict()` oslo.messaging sends as below (recorded from Magnum
    // 23.0.0: `all_tenants` does come out False, user_identity all dashes).
    let admin = || {
        let mut c = Map::new();
        for k in [
            "auth_token",
            "auth_token_info",
            "auth_url",
            "domain",
            "global_request_id",
            "project",
            "project_domain",
            "project_id",
            "project_name",
            "resource_uuid",
            "system_scope",
            "user",
            "user_domain",
            "user_domain_id",
            "user_domain_name",
            "user_id",
            "user_name",
        ] {
            c.insert(k.into(), Value::Null);
        }
        for (k, v) in [
            ("all_tenants", json!(false)),
            ("is_admin", json!(true)),
            ("is_admin_project", json!(true)),
            ("read_only", json!(false)),
            ("roles", json!([])),
            ("show_deleted", json!(false)),
            ("user_identity", json!("- - - - -")),
            ("request_id", json!(format!("req-{}", uuid::Uuid::new_v4()))),
        ] {
            c.insert(k.into(), v);
        }
        c
    };
    let context = ctx.map(|c| c.raw().clone()).unwrap_or_else(admin);
    for (k, v) in context {
        let redacted = matches!(
            k.as_str(),
            "auth_token" | "auth_url" | "auth_token_info" | "trust_id"
        );
        m.insert(
            format!("_context_{k}"),
            if redacted { Value::Null } else { v },
        );
    }
    Value::Object(m)
}

/// The AMQP body: enveloped (`messagingv2`) or not (`messaging`).
pub fn body(message: &Value, v2: bool) -> String {
    let inner = rpc_schema::pyjson::to_string(message);
    if v2 {
        rpc_schema::pyjson::to_string(&json!({"oslo.version": "2.0", "oslo.message": inner}))
    } else {
        inner
    }
}

struct Pending {
    routing_keys: Vec<String>,
    body: String,
}

/// Sends notifications (cloned everywhere; a disabled one sends nothing).
#[derive(Clone)]
pub struct Notifier {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    tx: mpsc::Sender<Pending>,
    publisher_id: String,
    topics: Vec<String>,
    v2: bool,
    metrics: Metrics,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("enabled", &self.inner.is_some())
            .finish()
    }
}

impl Notifier {
    /// Sends nothing.
    pub fn disabled() -> Notifier {
        Notifier { inner: None }
    }

    /// As `[oslo_messaging_notifications]` says; publishing on a channel
    /// of its own on the RPC server's current connection (`connection`).
    pub fn from_config(
        cfg: &Config,
        connection: watch::Receiver<Option<Arc<Connection>>>,
        metrics: Metrics,
    ) -> Notifier {
        let n = &cfg.notifications;
        let v2 = n.drivers.iter().any(|d| d == "messagingv2");
        let v1 = n.drivers.iter().any(|d| d == "messaging");
        if n.transport_url.is_some() {
            tracing::warn!(
                "[oslo_messaging_notifications] transport_url is ignored: Magnum sends notifications on its RPC transport ([DEFAULT] transport_url), and so does this conductor"
            );
        }
        if !(v2 || v1) {
            tracing::info!(drivers = ?n.drivers, "notifications disabled");
            return Notifier::disabled();
        }
        let host = cfg
            .default
            .host
            .clone()
            .unwrap_or_else(|| hostname().unwrap_or_else(|| "localhost".into()));
        let (tx, rx) = mpsc::channel(QUEUE);
        let r = &cfg.rabbit;
        let publisher = Publisher {
            connection,
            channel: None,
            exchange: cfg.default.control_exchange.clone(),
            durable: r.durable(),
            auto_delete: r.amqp_auto_delete,
            // `_get_queue_arguments(ha, 0, quorum, quorum_config, False)`.
            queue_args: crate::amqp::field_table(&crate::topology::queue_arguments(
                r,
                0,
                r.rabbit_quorum_queue,
                false,
            )),
            declared: HashSet::new(),
            metrics: metrics.clone(),
        };
        tokio::spawn(publisher.run(rx));
        tracing::info!(topics = ?n.topics, format = if v2 { "messagingv2" } else { "messaging" }, "notifications enabled");
        Notifier {
            inner: Some(Arc::new(Inner {
                tx,
                publisher_id: format!("container-infra.{host}"),
                topics: n.topics.clone(),
                v2,
                metrics,
            })),
        }
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// `notify_about_cluster_operation(context, action, outcome, cluster)`.
    pub fn cluster(
        &self,
        ctx: Option<&RequestContext>,
        action: Action,
        outcome: Outcome,
        cluster: Option<(&MagnumObject, &[MagnumObject])>,
    ) {
        let Some(inner) = &self.inner else { return };
        let stamp = Stamp::new();
        let payload = cadf_event(action, outcome, ctx, cluster, &stamp);
        let msg = message(&inner.publisher_id, action, outcome, payload, ctx, &stamp);
        let priority = outcome.priority().to_ascii_lowercase();
        let pending = Pending {
            routing_keys: inner
                .topics
                .iter()
                .map(|t| format!("{t}.{priority}"))
                .collect(),
            body: body(&msg, inner.v2),
        };
        let event = format!("magnum.cluster.{}", action.word());
        if inner.tx.try_send(pending).is_err() {
            inner
                .metrics
                .notifications
                .with_label_values(&[&event, "dropped"])
                .inc();
            tracing::warn!(
                event,
                "notification dropped: the broker has been away too long"
            );
        } else {
            inner
                .metrics
                .notifications
                .with_label_values(&[&event, "queued"])
                .inc();
        }
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// How long a notification waits before it is tried again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

struct Publisher {
    /// The RPC server's current connection. Notifications go on a channel
    /// of their own: a declaration the broker refuses (a notification queue
    /// another service declared with other arguments: 406) closes only
    /// that channel, never the one replies and forwards go out on.
    connection: watch::Receiver<Option<Arc<Connection>>>,
    channel: Option<Channel>,
    exchange: String,
    durable: bool,
    auto_delete: bool,
    queue_args: FieldTable,
    /// (channel id, routing key) declared on the current channel.
    declared: HashSet<(u16, String)>,
    metrics: Metrics,
}

impl Publisher {
    async fn run(mut self, mut rx: mpsc::Receiver<Pending>) {
        while let Some(p) = rx.recv().await {
            for key in &p.routing_keys {
                // Retry until published: the broker may be reconnecting.
                loop {
                    let Some(chan) = self.channel().await else {
                        return;
                    };
                    match self.publish(&chan, key, &p.body).await {
                        Ok(()) => {
                            self.metrics
                                .notifications
                                .with_label_values(&["all", "sent"])
                                .inc();
                            break;
                        }
                        Err(e) => {
                            // A channel the broker closed is opened again
                            // by `channel` at the next attempt.
                            tracing::warn!(routing_key = %key, error = %e, "notification not published yet; retrying");
                            self.metrics
                                .notifications
                                .with_label_values(&["all", "retried"])
                                .inc();
                            self.declared.clear();
                            tokio::time::sleep(RETRY).await;
                        }
                    }
                }
            }
        }
    }

    /// The notifications' channel, opened (in confirm mode) on the current
    /// connection when there is none or the broker closed it; `None` once
    /// the RPC server is gone.
    async fn channel(&mut self) -> Option<Channel> {
        loop {
            if let Some(ch) = self.channel.as_ref().filter(|c| c.is_connected()) {
                return Some(ch.clone());
            }
            self.channel = None;
            let current = self.connection.borrow_and_update().clone();
            let Some(conn) = current.filter(|c| c.is_connected()) else {
                if self.connection.changed().await.is_err() {
                    return None;
                }
                continue;
            };
            let opened = async {
                let ch = conn.create_channel().await?;
                ch.confirm_select().await?;
                Ok::<_, AmqpError>(ch)
            }
            .await;
            // Not kept: the server waits for every holder of its connection
            // to let go when it shuts down.
            drop(conn);
            match opened {
                Ok(ch) => {
                    self.declared.clear();
                    self.channel = Some(ch.clone());
                    return Some(ch);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot open the notifications' channel; retrying");
                    tokio::time::sleep(RETRY).await;
                }
            }
        }
    }

    async fn publish(&mut self, chan: &Channel, key: &str, body: &str) -> Result<(), AmqpError> {
        let id = (chan.id(), key.to_string());
        if !self.declared.contains(&id) {
            chan.exchange_declare(
                &self.exchange,
                ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: self.durable,
                    auto_delete: self.auto_delete,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await?;
            chan.queue_declare(
                key,
                QueueDeclareOptions {
                    durable: self.durable,
                    auto_delete: self.auto_delete,
                    ..Default::default()
                },
                self.queue_args.clone(),
            )
            .await?;
            chan.queue_bind(key, &self.exchange, key, FieldTable::default())
                .await?;
            self.declared.insert(id);
        }
        chan.basic_publish(
            &self.exchange,
            key,
            BasicPublishOptions::default(),
            body.as_bytes(),
            crate::reply::properties(None),
        )?
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpc_schema::ovo;

    fn obj(class: &'static ovo::ClassSpec, v: Value) -> MagnumObject {
        let mut o = MagnumObject::new(class);
        for (k, v) in v.as_object().unwrap() {
            o.set(k, v.clone()).unwrap();
        }
        o
    }

    #[test]
    fn the_message_magnum_sends() {
        let c = obj(
            &ovo::CLUSTER,
            json!({"uuid": "5b7c6a52-6f3e-4b8a-9d3e-0f6a1b2c3d4e", "name": "k8s", "status": "CREATE_IN_PROGRESS",
                   "project_id": "p", "created_at": "2026-11-25T08:00:01+00:00", "docker_volume_size": 20,
                   "labels": {"kube_tag": "v1.30.4"}}),
        );
        let ng = |role: &str, n: i64, ip: &str| {
            obj(
                &ovo::NODE_GROUP,
                json!({"role": role, "node_count": n, "node_addresses": [ip]}),
            )
        };
        let ngs = [ng("master", 3, "10.0.0.1"), ng("worker", 2, "10.0.0.2")];
        let ctx = RequestContext::from_map(
            json!({"user_id": "u", "project_id": "p", "auth_token": "SECRET", "is_admin": false})
                .as_object()
                .unwrap()
                .clone(),
        );
        let stamp = Stamp::new();
        let e = cadf_event(
            Action::Create,
            Outcome::Pending,
            Some(&ctx),
            Some((&c, &ngs)),
            &stamp,
        );
        assert_eq!(e["initiator"]["user_id"], "u");
        let data = &e["target"]["attachments"][0]["content"];
        assert_eq!(data["docker_volume_size:"], 20);
        assert_eq!(data["created_at"], "2026-11-25T08:00:01.000000");
        assert_eq!(
            (data["master_count"].as_i64(), data["node_count"].as_i64()),
            (Some(3), Some(2))
        );
        assert_eq!(data["master_addresses"], json!(["10.0.0.1"]));
        let m = message(
            "container-infra.h",
            Action::Create,
            Outcome::Failure,
            e,
            Some(&ctx),
            &stamp,
        );
        assert_eq!(m["event_type"], "magnum.cluster.create");
        assert_eq!(m["priority"], "ERROR");
        assert_eq!(m["_context_auth_token"], Value::Null, "never the token");
        let b = body(&m, true);
        assert!(!b.contains("SECRET"));
        let outer: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(outer["oslo.version"], "2.0");
        assert_eq!(Action::of_status("DELETE_COMPLETE"), Some(Action::Delete));
        assert_eq!(Action::of_status("UPDATE_IN_PROGRESS"), None);
    }
}
