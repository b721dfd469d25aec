//! `credential_rotate` (a call): the cluster's OpenStack credential replaced.
//!
//! As magnum-capi-helm does it (the only CAPI driver that can): a new
//! application credential for the calling user, made with the request's
//! token; the clouds.yaml Secret CAPO reads and the addons that carry the
//! cloud config (OpenStack CCM, Cinder CSI, Manila CSI's Secret) updated to it; the cluster's
//! `user_id` moved to the caller (the credential's owner); then, and only
//! then, the old credential deleted with the conductor's own
//! `[keystone_auth]` credentials. Nothing is replaced if the new one cannot
//! be made. The status is left as it is (an update in progress stays in
//! progress); a failure to delete the old credential is logged and said in
//! `status_reason`, as magnum-capi-helm does. With one static credential
//! for every cluster (`[capi] static_*`) there is nothing to rotate:
//! Magnum's "Credential rotation is not supported by driver."

use rpc_schema::ovo::MagnumObject;
use rpc_schema::{Outcome, RemoteFailure, RequestContext};
use serde_json::{Map, Value, json};

use crate::capi::addons;
use crate::handlers::DurableSignal;
use crate::lifecycle::engine::Engine;
use crate::lifecycle::error::StepError;
use crate::lifecycle::plan::COMPLETED;
use crate::lifecycle::runner::Op;

/// Magnum's status rule for `credential_rotate`, with its message.
pub fn check(status: &str) -> Result<(), RemoteFailure> {
    if COMPLETED.contains(&status) || status == "UPDATE_IN_PROGRESS" || status == "UPDATE_FAILED" {
        return Ok(());
    }
    Err(RemoteFailure::not_supported(&format!(
        "magnum.conductor.handlers.credential_conductor when cluster status is \"{status}\""
    )))
}

impl Engine {
    /// `credential_rotate` (a call; the reply is the cluster object).
    pub async fn credential_rotate(
        &self,
        ctx: &RequestContext,
        cluster: &MagnumObject,
        durable: &mut DurableSignal,
    ) -> Outcome {
        let uuid = cluster.get_str("uuid").unwrap_or_default().to_string();
        self.operate(Op::CredentialRotate, &uuid, ctx, durable, async |_run| {
            self.rotate_steps(&uuid, ctx).await
        })
        .await
    }

    async fn rotate_steps(&self, uuid: &str, ctx: &RequestContext) -> Result<Value, StepError> {
        let row = self.cluster(uuid).await?;
        check(row.get_str("status").unwrap_or_default()).map_err(StepError::Refused)?;
        if !self.0.credentials.rotatable() {
            return Err(StepError::Refused(RemoteFailure::magnum_with_message(
                "NotSupported",
                "Credential rotation is not supported by driver.",
                Map::new(),
            )));
        }
        let template = self.template(&row).await?;
        let ngs = self.nodegroups(uuid).await?;
        let (desired, network_driver) = self.desired(&row, &template, &ngs, None)?;
        let input = desired.input;
        if let Some(a) = &input.adopted {
            // Its cloud provider and CSI come from its driver's addons,
            // which this conductor does not render: a new credential would
            // reach its machines but not them.
            return Err(StepError::Refused(RemoteFailure::magnum_with_message(
                "NotSupported",
                &format!(
                    "Credential rotation is not supported for a cluster adopted from {}: its \
                     addons still use the credential that driver gave them.",
                    if a.driver.is_empty() {
                        "another driver"
                    } else {
                        a.driver.as_str()
                    }
                ),
                Map::new(),
            )));
        }
        let old = self
            .0
            .credentials
            .stored_for(&self.0.client, &input.namespace, &input.stack_id)
            .await?;
        let old_user = row.get_str("user_id").unwrap_or_default().to_string();
        let cloud = self
            .0
            .credentials
            .create_new(&input, row.get_str("name").unwrap_or(uuid), ctx)
            .await?;
        crate::failpoint::hit("rotate.after_create").await;
        // The Secret and the addons: if either is refused, the new credential
        // goes and the old one stays in use.
        let applied = async {
            let secret = addons::credentials_secret(
                &input,
                &cloud,
                &self.0.credentials.interface,
                self.0.credentials.verify,
            );
            self.0.applier.apply(&secret.manifest).await?;
            // The identity the addons already run with (a cluster made
            // before identities keeps the chart default), and Manila CSI's
            // Secret with the new credential.
            let objects = self.addon_objects(&input, &network_driver, &cloud).await?;
            self.apply_owned(&input, objects, None).await?;
            Ok::<(), StepError>(())
        }
        .await;
        if let Err(e) = applied {
            let new_user = ctx.user_id().unwrap_or_default();
            if let Err(d) = self
                .0
                .credentials
                .delete(new_user, &cloud.application_credential_id)
                .await
            {
                tracing::warn!(cluster = %uuid, error = %d, "the new application credential could not be deleted after a failed rotation");
            }
            return Err(e);
        }
        let mut changes = Vec::new();
        if let Some(u) = ctx.user_id().filter(|u| *u != old_user) {
            changes.push(("user_id", json!(u)));
        }
        if let Some((old_id, _)) = &old
            && let Err(e) = self.0.credentials.delete(&old_user, old_id).await
        {
            tracing::warn!(cluster = %uuid, application_credential = %old_id, error = %e, "old application credential not deleted");
            changes.push((
                "status_reason",
                json!(format!(
                    "the previous application credential {old_id} could not be deleted: {e}"
                )),
            ));
        }
        let saved = if changes.is_empty() {
            row
        } else {
            self.save_cluster(uuid, &changes).await?
        };
        tracing::info!(cluster = %uuid, new = %cloud.application_credential_id, old = ?old.map(|o| o.0), "credentials rotated");
        Ok(saved.to_primitive())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_as_magnum() {
        assert!(check("CREATE_COMPLETE").is_ok());
        assert!(check("UPDATE_FAILED").is_ok());
        let e = check("CREATE_IN_PROGRESS").unwrap_err();
        assert_eq!(
            e.message,
            "magnum.conductor.handlers.credential_conductor when cluster status is \"CREATE_IN_PROGRESS\" is not supported."
        );
    }
}
