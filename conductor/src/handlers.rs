//! The handler interface the RPC server dispatches to, and the handlers of
//! this milestone: `ping_conductor`, oslo's ping, and the Python behaviour
//! of the federation methods. Every other method answers `NotSupported`
//! until the issue that implements it plugs in here.

use std::future::Future;

use rpc_schema::ovo::MagnumObject;
use rpc_schema::{ConductorRequest, Outcome, RemoteFailure, RequestContext};
use serde_json::Value;
use tokio::sync::oneshot;

/// Signals that a request's first durable effect is recorded (a DB row
/// written, an operation journaled). The server acknowledges the AMQP
/// message then, so the broker redelivers it if we crash before that
/// point, and never after. A handler that never signals is acknowledged
/// when it returns.
#[derive(Debug)]
pub struct DurableSignal(Option<oneshot::Sender<Durability>>);

/// What a handler tells the server about its message before returning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The first durable effect is recorded: acknowledge now.
    Recorded,
    /// Nothing could be recorded because a dependency (the database) is
    /// unavailable: give the message back to the broker after a pause rather
    /// than acknowledge and lose it.
    RetryLater,
}

impl DurableSignal {
    pub fn new() -> (DurableSignal, oneshot::Receiver<Durability>) {
        let (tx, rx) = oneshot::channel();
        (DurableSignal(Some(tx)), rx)
    }

    /// The first durable effect is recorded: acknowledge the message now.
    pub fn recorded(&mut self) {
        self.send(Durability::Recorded);
    }

    /// Nothing durable happened and it may work later: requeue the message
    /// (casts; a call gets its failure reply as usual). Ignored once
    /// [`DurableSignal::recorded`] was called.
    pub fn retry_later(&mut self) {
        self.send(Durability::RetryLater);
    }

    /// Neither recorded nor retried yet.
    pub fn is_pending(&self) -> bool {
        self.0.is_some()
    }

    fn send(&mut self, d: Durability) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(d);
        }
    }
}

/// A request, ready for a handler.
#[derive(Debug)]
pub struct HandlerRequest {
    pub context: RequestContext,
    pub request: ConductorRequest,
    /// Calls get the returned outcome as a reply; casts do not.
    pub is_call: bool,
    /// `_unique_id`, for idempotency.
    pub unique_id: Option<String>,
    /// Whether the broker says this is a redelivery (we may have seen it).
    pub redelivered: bool,
    pub durable: DurableSignal,
}

/// Where a request is handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Here,
    /// Republished unchanged to `topic`, where a Python conductor runs
    /// `driver`, the cluster's ([`crate::forward`]).
    Forward {
        topic: String,
        driver: String,
    },
}

/// What the RPC server dispatches decoded requests to.
pub trait Handlers: Send + Sync + 'static {
    fn handle(&self, req: HandlerRequest) -> impl Future<Output = Outcome> + Send;

    /// Asked before [`Handlers::handle`]: whether the request is ours.
    fn route(&self, _req: &ConductorRequest) -> impl Future<Output = Route> + Send {
        async { Route::Here }
    }
}

/// Handlers of the RPC milestone.
#[derive(Debug, Default, Clone)]
pub struct BaseHandlers;

/// The failure for a method whose handler is not implemented yet.
pub fn not_implemented_yet(method: &str) -> RemoteFailure {
    RemoteFailure::not_supported(&format!("{method} (not implemented yet by this conductor)"))
}

impl BaseHandlers {
    /// The outcome for requests every conductor answers the same way.
    pub fn base_outcome(req: &ConductorRequest) -> Outcome {
        match req {
            ConductorRequest::PingConductor => Outcome::Result(Value::Bool(true)),
            ConductorRequest::OsloPing => Outcome::Result(Value::String("pong".into())),
            ConductorRequest::FederationCreate { .. }
            | ConductorRequest::FederationUpdate { .. }
            | ConductorRequest::FederationDelete { .. } => {
                Outcome::Failure(RemoteFailure::builtin(
                    "NotImplementedError",
                    "This feature is not yet implemented.",
                ))
            }
            other => Outcome::Failure(not_implemented_yet(other.method())),
        }
    }
}

impl Handlers for BaseHandlers {
    async fn handle(&self, req: HandlerRequest) -> Outcome {
        Self::base_outcome(&req.request)
    }
}

/// The conductor's handlers: the database-backed ones implemented so far,
/// [`BaseHandlers`] for the rest.
#[derive(Clone)]
pub struct ConductorHandlers {
    pub db: common::db::Db,
    pub x509: common::config::X509Opts,
    /// The object-indirection API (magnum-api as its console script).
    pub indirection: crate::indirection::Indirection,
    /// The cluster lifecycle, when a management cluster is configured.
    pub lifecycle: Option<crate::lifecycle::Engine>,
    /// `[conductor] legacy_topic`: where other drivers' clusters' requests
    /// go (None: refused).
    pub legacy_topic: Option<String>,
}

fn no_management_cluster(method: &str) -> Outcome {
    Outcome::Failure(RemoteFailure::not_supported(&format!(
        "{method} (this conductor has no management cluster: set [capi] kubeconfig)"
    )))
}

/// The cluster a lifecycle request is about: (its uuid, the object the
/// request carries, an upgrade's target template). None: not a cluster
/// operation.
fn lifecycle_target(r: &ConductorRequest) -> Option<(String, Option<&MagnumObject>, Option<&str>)> {
    let uuid = |c: &MagnumObject| c.get_str("uuid").unwrap_or_default().to_string();
    match r {
        ConductorRequest::ClusterDelete { uuid } => Some((uuid.clone(), None, None)),
        ConductorRequest::ClusterUpgrade {
            cluster,
            cluster_template,
            ..
        } => Some((
            uuid(cluster),
            Some(cluster),
            Some(cluster_template.get_str("uuid").unwrap_or_default()),
        )),
        ConductorRequest::ClusterCreate { cluster, .. }
        | ConductorRequest::ClusterUpdate { cluster, .. }
        | ConductorRequest::ClusterResize { cluster, .. }
        | ConductorRequest::CredentialRotate { cluster }
        | ConductorRequest::NodegroupCreate { cluster, .. }
        | ConductorRequest::NodegroupUpdate { cluster, .. }
        | ConductorRequest::NodegroupDelete { cluster, .. } => {
            Some((uuid(cluster), Some(cluster), None))
        }
        _ => None,
    }
}

/// The cluster a certificate request is about.
fn certificate_target(r: &ConductorRequest) -> Option<&MagnumObject> {
    match r {
        ConductorRequest::GetCaCertificate { cluster, .. }
        | ConductorRequest::SignCertificate { cluster, .. }
        | ConductorRequest::RotateCaCertificate { cluster } => Some(cluster),
        _ => None,
    }
}

impl Handlers for ConductorHandlers {
    /// With a legacy topic, requests about clusters that are not ours
    /// (their operations and their certificates) go there. An error while
    /// deciding keeps the request here, where [`ConductorHandlers::handle`]
    /// decides again (and a database outage sends a cast back to the queue).
    async fn route(&self, req: &ConductorRequest) -> Route {
        let (Some(topic), Some(l)) = (&self.legacy_topic, &self.lifecycle) else {
            return Route::Here;
        };
        let (uuid, object) = match (lifecycle_target(req), certificate_target(req)) {
            (Some((uuid, object, _)), _) => (uuid, object),
            (None, Some(c)) => (c.get_str("uuid").unwrap_or_default().to_string(), Some(c)),
            (None, None) => return Route::Here,
        };
        match Box::pin(l.owner_of_request(&uuid, object)).await {
            Ok(Some(owner)) if !owner.is_ours() => Route::Forward {
                topic: topic.clone(),
                driver: owner.driver().to_string(),
            },
            _ => Route::Here,
        }
    }

    async fn handle(&self, req: HandlerRequest) -> Outcome {
        // The reply carries objects at the versions the caller sent (the
        // indirection methods choose theirs from `object_versions`).
        let versions = match req.request {
            ConductorRequest::ObjectClassActionVersions { .. }
            | ConductorRequest::ObjectAction { .. }
            | ConductorRequest::ObjectBackportVersions { .. }
            | ConductorRequest::ObjectBackport { .. } => None,
            ref other => Some(other.caller_versions()),
        };
        let method = req.request.method();
        let outcome = self.dispatch(req).await;
        match (outcome, versions) {
            (Outcome::Result(v), Some(versions)) => match rpc_schema::ovo::for_caller(v, &versions)
            {
                Ok(v) => Outcome::Result(v),
                Err(e) => {
                    tracing::warn!(method, error = %e, "the reply cannot be given at the caller's object version");
                    Outcome::Failure(e.to_failure())
                }
            },
            (other, _) => other,
        }
    }
}

impl ConductorHandlers {
    /// Every branch that awaits a large state machine (an operation, the
    /// object indirection, the CA) is boxed: the future of this function is
    /// then a few hundred bytes, not the largest branch's ~36 KB, and each
    /// message's task is not copied whole when it is spawned (the copies
    /// were 29% of a `ping_conductor` call's instructions: docs/benchmarks.md).
    async fn dispatch(&self, mut req: HandlerRequest) -> Outcome {
        // Another driver's cluster is refused before anything is done.
        if let (Some(l), Some((uuid, object, new_template))) =
            (&self.lifecycle, lifecycle_target(&req.request))
            && let Some(refused) = Box::pin(l.refuse_foreign(
                req.request.method(),
                &uuid,
                object,
                new_template,
                &mut req.durable,
            ))
            .await
        {
            return refused;
        }
        let method = req.request.method();
        if is_lifecycle(&req.request) {
            return match &self.lifecycle {
                Some(l) => Box::pin(cluster_operation(l, req)).await,
                None => no_management_cluster(method),
            };
        }
        let HandlerRequest {
            context, request, ..
        } = req;
        match request {
            ConductorRequest::GetCaCertificate {
                cluster,
                ca_cert_type,
            } => {
                Box::pin(crate::ca::get_ca_certificate(
                    &self.db,
                    &context,
                    &cluster,
                    ca_cert_type.as_deref(),
                ))
                .await
            }
            ConductorRequest::SignCertificate {
                cluster,
                certificate,
            } => {
                Box::pin(crate::ca::sign_certificate(
                    &self.db,
                    &self.x509,
                    &context,
                    &cluster,
                    certificate,
                ))
                .await
            }
            ConductorRequest::RotateCaCertificate { cluster } => {
                crate::ca::rotate_ca_certificate(&cluster)
            }
            ConductorRequest::ObjectClassActionVersions {
                objname,
                objmethod,
                object_versions,
                args,
                kwargs,
            } => {
                Box::pin(self.indirection.class_action(
                    &context,
                    &objname,
                    &objmethod,
                    &object_versions,
                    &args,
                    &kwargs,
                ))
                .await
            }
            ConductorRequest::ObjectAction {
                objinst,
                objmethod,
                args,
                kwargs,
            } => {
                Box::pin(
                    self.indirection
                        .object_action(&context, &objinst, &objmethod, &args, &kwargs),
                )
                .await
            }
            ConductorRequest::ObjectBackportVersions {
                objinst,
                object_versions,
            } => self.indirection.backport(&objinst, &object_versions),
            ConductorRequest::ObjectBackport {
                objinst,
                target_version,
            } => {
                // `objinst.obj_to_primitive(target_version=...)`.
                let mut versions = serde_json::Map::new();
                versions.insert(
                    objinst.class.name.to_string(),
                    Value::String(target_version),
                );
                self.indirection.backport(&objinst, &versions)
            }
            other => BaseHandlers::base_outcome(&other),
        }
    }
}

/// The cluster operations: the ones that need the management cluster.
fn is_lifecycle(r: &ConductorRequest) -> bool {
    use ConductorRequest::*;
    matches!(
        r,
        ClusterCreate { .. }
            | ClusterDelete { .. }
            | ClusterUpdate { .. }
            | ClusterResize { .. }
            | ClusterUpgrade { .. }
            | CredentialRotate { .. }
            | NodegroupCreate { .. }
            | NodegroupUpdate { .. }
            | NodegroupDelete { .. }
    )
}

/// One cluster operation: its decoded arguments handed to the engine,
/// whose outcome is the reply (a call) or the log line (a cast).
async fn cluster_operation(l: &crate::lifecycle::Engine, req: HandlerRequest) -> Outcome {
    use ConductorRequest::*;
    let HandlerRequest {
        context: ctx,
        request,
        mut durable,
        ..
    } = req;
    let d = &mut durable;
    match request {
        ClusterCreate {
            cluster,
            master_count,
            node_count,
            create_timeout,
        } => {
            l.cluster_create(&ctx, cluster, master_count, node_count, create_timeout, d)
                .await
        }
        ClusterDelete { uuid } => l.cluster_delete(&ctx, &uuid, d).await,
        ClusterUpdate {
            cluster,
            node_count,
            health_status,
            health_status_reason,
            rollback: _,
        } => {
            l.cluster_update(
                &ctx,
                &cluster,
                node_count,
                health_status,
                health_status_reason,
                d,
            )
            .await
        }
        ClusterResize {
            cluster,
            node_count,
            nodes_to_remove,
            nodegroup,
        } => {
            l.cluster_resize(&ctx, &cluster, node_count, &nodes_to_remove, &nodegroup, d)
                .await
        }
        ClusterUpgrade {
            cluster,
            cluster_template,
            max_batch_size,
            nodegroup,
            rollback: _,
        } => {
            l.cluster_upgrade(
                &ctx,
                &cluster,
                &cluster_template,
                max_batch_size,
                &nodegroup,
                d,
            )
            .await
        }
        CredentialRotate { cluster } => l.credential_rotate(&ctx, &cluster, d).await,
        NodegroupCreate { cluster, nodegroup } => {
            l.nodegroup_create(&ctx, &cluster, &nodegroup, d).await
        }
        NodegroupUpdate { cluster, nodegroup } => {
            l.nodegroup_update(&ctx, &cluster, &nodegroup, d).await
        }
        NodegroupDelete { cluster, nodegroup } => {
            l.nodegroup_delete(&ctx, &cluster, &nodegroup, d).await
        }
        other => BaseHandlers::base_outcome(&other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_outcomes() {
        assert_eq!(
            BaseHandlers::base_outcome(&ConductorRequest::PingConductor),
            Outcome::Result(Value::Bool(true))
        );
        let f =
            BaseHandlers::base_outcome(&ConductorRequest::FederationDelete { uuid: "x".into() });
        assert!(
            matches!(f, Outcome::Failure(ref f) if f.class == "NotImplementedError" && f.module == "builtins")
        );
        let f = BaseHandlers::base_outcome(&ConductorRequest::ClusterDelete { uuid: "x".into() });
        assert!(
            matches!(f, Outcome::Failure(ref f) if f.class == "NotSupported" && f.http_code() == 400)
        );
    }
}
