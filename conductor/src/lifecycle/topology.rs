//! Writing the topology of a cluster run by a ClusterClass (thin I/O; what
//! to write is decided by [`crate::capi::topology::patch`] from
//! [`super::plan::topology_want`]).
//!
//! The patch is computed from a fresh read of the CAPI Cluster, never
//! from the watch cache, and guarded by `test`s of what it changes: when
//! something else (CAPI's defaulting, another conductor, an operator)
//! wrote the topology between the read and the patch, the apiserver
//! refuses the patch (422) and it is computed again from a new read.

use kube::api::{Patch, PatchParams};
use rpc_schema::ovo::MagnumObject;

use super::engine::{Engine, capi_apiversion, dynamic_api};
use super::error::StepError;
use super::plan::{self, Desired};
use crate::capi::topology;

/// The field manager of topology writes.
const FIELD_MANAGER: &str = "magnum-conductor";
/// Reads and patches before a topology that keeps changing is an error.
const ATTEMPTS: usize = 3;

impl Engine {
    /// Bring the topology of `cluster`'s CAPI Cluster to what `d` (from
    /// the rows `ngs`) wants. Returns whether anything was written.
    pub(super) async fn apply_topology(
        &self,
        cluster: &MagnumObject,
        d: &Desired,
        ngs: &[MagnumObject],
    ) -> Result<bool, StepError> {
        let Some(stack) = cluster.get_str("stack_id") else {
            return Err(StepError::Invalid("cluster without stack_id".into()));
        };
        let ns = self.namespace_of(cluster);
        let api = dynamic_api(
            &self.0.client,
            &ns,
            capi_apiversion(self.0.line),
            "Cluster",
            "clusters",
        );
        let want = plan::topology_want(d, ngs);
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        let mut last = String::new();
        for _ in 0..ATTEMPTS {
            let current = crate::mgmt::with_retries("get cluster", || api.get(stack)).await?;
            let current = serde_json::to_value(&current)
                .map_err(|e| StepError::Invalid(format!("CAPI Cluster {stack}: {e}")))?;
            let ops = topology::patch(&current, &want)
                .map_err(|e| StepError::Invalid(format!("CAPI Cluster {ns}/{stack}: {e}")))?;
            if ops.is_empty() {
                return Ok(false);
            }
            let body: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
                .map_err(|e| StepError::Invalid(format!("topology patch: {e}")))?;
            match api.patch(stack, &pp, &Patch::Json::<()>(body)).await {
                Ok(_) => {
                    tracing::info!(cluster = %cluster.get_str("uuid").unwrap_or_default(),
                        capi_cluster = %format!("{ns}/{stack}"), "topology written");
                    return Ok(true);
                }
                // A `test` failed: the topology changed since the read.
                Err(kube::Error::Api(s)) if s.code == 422 => {
                    tracing::debug!(capi_cluster = %stack, reason = %s.message,
                        "topology changed while it was written; reading it again");
                    last = s.message.clone();
                }
                Err(kube::Error::Api(s)) => {
                    return Err(StepError::Invalid(format!(
                        "the management cluster refused the topology of Cluster {ns}/{stack}: {}",
                        s.message
                    )));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(StepError::Invalid(format!(
            "the topology of Cluster {ns}/{stack} kept changing while it was written \
             ({ATTEMPTS} attempts; last refusal: {last})"
        )))
    }
}
