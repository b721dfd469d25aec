//! The management cluster: one kube client per process, the CAPI line it
//! stores, and server-side apply of rendered objects (thin I/O adapter).

use std::collections::HashMap;
use std::sync::Arc;

use common::config::{CapiOpts, CapiVersion};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, ValidationDirective,
};
use kube::{Client, Config};
use serde_json::Value;
use tokio::sync::Mutex;

use crate::capi::render::CapiLine;

pub const FIELD_MANAGER: &str = "magnum-conductor";

/// Whether a management-cluster error is worth another try: the request
/// never got an answer (connection refused or reset, timeout), or the
/// apiserver asked us to come back (429, 5xx). Validation errors, conflicts
/// and "not found" are answers: they are returned at once.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        // A server-side apply naming a field the CRD does not declare (a CRD
        // older than the conductor expects) is answered 500 by the apiserver
        // (kube-apiserver 1.28: "failed to create typed patch object ...:
        // .spec.x: field not declared in schema"): a refusal, not an outage.
        kube::Error::Api(s) if s.message.contains("failed to create typed patch object") => false,
        kube::Error::Api(s) => s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Run a management-cluster request, retrying transient failures with
/// exponential backoff (0.2 s doubling to 5 s, 8 retries: about 25 s) so a
/// restarting or overloaded apiserver does not fail a cluster operation.
pub async fn with_retries<T, F, Fut>(what: &str, op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    use backon::Retryable;
    let backoff = backon::ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(200))
        .with_max_delay(std::time::Duration::from_secs(5))
        .with_max_times(8)
        .with_jitter();
    op.retry(backoff)
        .sleep(tokio::time::sleep)
        .when(is_transient)
        .notify(|e, after| {
            tracing::warn!(operation = what, error = %e, retry_in = ?after, "management cluster request failed, retrying");
        })
        .await
}

/// Delete `name` through `api` (in the background: its dependents are
/// collected after it), retrying transient failures; already gone is done.
pub async fn delete_if_present(api: &Api<DynamicObject>, name: &str) -> Result<(), kube::Error> {
    let dp = kube::api::DeleteParams::background();
    match with_retries("delete", || api.delete(name, &dp)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MgmtError {
    #[error("management cluster configuration: {0}")]
    Config(String),
    #[error("management cluster API: {0}")]
    Api(#[from] kube::Error),
    #[error("the management cluster does not serve {0}")]
    NotServed(String),
    #[error("object without {0}")]
    Malformed(&'static str),
}

/// The client for `[capi] kubeconfig` (else `KUBECONFIG`, else in-cluster).
pub async fn client(opts: &CapiOpts) -> Result<Client, MgmtError> {
    let config = match &opts.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| MgmtError::Config(format!("{path}: {e}")))?;
            Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| MgmtError::Config(format!("{path}: {e}")))?
        }
        None => Config::infer()
            .await
            .map_err(|e| MgmtError::Config(e.to_string()))?,
    };
    let mut config = config;
    // Named in the apiserver's audit log and request metrics.
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(concat!("magnum-conductor/", env!("CARGO_PKG_VERSION"))),
    ));
    Client::try_from(config).map_err(MgmtError::Api)
}

/// The CAPI line to write: as configured, or the preferred (stored)
/// version of `cluster.x-k8s.io` on the management cluster.
pub async fn detect_line(client: &Client, configured: CapiVersion) -> Result<CapiLine, MgmtError> {
    match configured {
        CapiVersion::V1beta1 => return Ok(CapiLine::V1beta1),
        CapiVersion::V1beta2 => return Ok(CapiLine::V1beta2),
        CapiVersion::Auto => {}
    }
    let groups = client.list_api_groups().await?;
    let capi = groups
        .groups
        .iter()
        .find(|g| g.name == "cluster.x-k8s.io")
        .ok_or_else(|| {
            MgmtError::NotServed("cluster.x-k8s.io (is Cluster API installed?)".into())
        })?;
    let preferred = capi
        .preferred_version
        .as_ref()
        .map(|v| v.version.clone())
        .or_else(|| capi.versions.first().map(|v| v.version.clone()))
        .unwrap_or_default();
    match preferred.as_str() {
        "v1beta2" => Ok(CapiLine::V1beta2),
        "v1beta1" => Ok(CapiLine::V1beta1),
        other => Err(MgmtError::NotServed(format!(
            "cluster.x-k8s.io/{other} (supported: v1beta1, v1beta2)"
        ))),
    }
}

/// Server-side apply with discovery of each kind's resource (cached).
#[derive(Clone)]
pub struct Applier {
    client: Client,
    resources: Arc<Mutex<HashMap<(String, String), ApiResource>>>,
}

impl Applier {
    pub fn new(client: Client) -> Applier {
        Applier {
            client,
            resources: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    async fn resource(&self, api_version: &str, kind: &str) -> Result<ApiResource, MgmtError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.resources.lock().await.get(&key) {
            return Ok(r.clone());
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (ar, _) = with_retries("discovery", || {
            kube::discovery::pinned_kind(&self.client, &gvk)
        })
        .await?;
        self.resources.lock().await.insert(key, ar.clone());
        Ok(ar)
    }

    /// Apply one object (Strict field validation: a typo is an error, not a
    /// silently pruned field). Returns the object as stored. A field
    /// another manager set to another value is a conflict (409).
    pub async fn apply(&self, obj: &Value) -> Result<DynamicObject, MgmtError> {
        self.apply_with(obj, false).await
    }

    /// Apply one object taking its fields over from whoever set them: only
    /// for the objects of a cluster `adopt` took from another driver (Helm
    /// wrote them; this conductor manages them now).
    pub async fn apply_taking_over(&self, obj: &Value) -> Result<DynamicObject, MgmtError> {
        self.apply_with(obj, true).await
    }

    async fn apply_with(&self, obj: &Value, force: bool) -> Result<DynamicObject, MgmtError> {
        let av = obj["apiVersion"]
            .as_str()
            .ok_or(MgmtError::Malformed("apiVersion"))?;
        let kind = obj["kind"].as_str().ok_or(MgmtError::Malformed("kind"))?;
        let name = obj["metadata"]["name"]
            .as_str()
            .ok_or(MgmtError::Malformed("metadata.name"))?;
        let ar = self.resource(av, kind).await?;
        let api: Api<DynamicObject> = match obj["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let mut pp = PatchParams::apply(FIELD_MANAGER);
        pp.force = force;
        pp.field_validation = Some(ValidationDirective::Strict);
        let patch = Patch::Apply(obj);
        Ok(with_retries("apply", || api.patch(name, &pp, &patch)).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure("x", "y").with_code(code),
        ))
    }

    #[test]
    fn only_unanswered_or_overloaded_requests_are_retried() {
        assert!(is_transient(&api(429)));
        assert!(is_transient(&api(503)));
        assert!(is_transient(&api(500)));
        assert!(!is_transient(&api(422)), "a refusal is an answer");
        assert!(!is_transient(&api(409)));
        assert!(!is_transient(&api(404)));
        let unknown_field = kube::Error::Api(Box::new(
            kube::core::Status::failure(
                "failed to create typed patch object (ns/x; infrastructure.cluster.x-k8s.io/v1beta1, Kind=OpenStackMachineTemplate): .spec.bogus: field not declared in schema",
                "",
            )
            .with_code(500),
        ));
        assert!(
            !is_transient(&unknown_field),
            "a refused object is an answer"
        );
    }

    #[tokio::test]
    async fn retries_until_the_apiserver_answers() {
        let calls = std::sync::atomic::AtomicU32::new(0);
        let r = with_retries("test", || async {
            match calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 | 1 => Err(api(503)),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(r.unwrap(), 7);
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
        let calls = std::sync::atomic::AtomicU32::new(0);
        let r: Result<(), _> = with_retries("test", || async {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(api(422))
        })
        .await;
        assert!(r.is_err());
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "no retry"
        );
    }
}
