//! The OpenStack credentials a cluster's CAPO and cloud-provider pods use.
//!
//! Default: one Keystone application credential per cluster, created for
//! the requesting user with the token of the `cluster_create` request, kept
//! in the cluster's clouds.yaml Secret (`<stack_id>-cloud-credentials`), and
//! deleted with the conductor's `[keystone_auth]` credentials once the
//! cluster is gone. A create resumed without its request (after a restart)
//! reuses the Secret if it was written, and otherwise waits for the cast,
//! which the broker redelivers because it is acknowledged only after the
//! Secret exists.
//!
//! Alternative for test and demo clouds: one operator-supplied credential
//! shared by every cluster (`[capi] static_*`).

use common::config::{CapiOpts, KeystoneAuthOpts};
use common::secret::Secret;
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kube::api::Api;
use rpc_schema::context::RequestContext;
use rpc_schema::ovo::MagnumObject;

use super::keystone::{Keystone, KeystoneError};
use crate::capi::addons::CloudConfig;
use crate::capi::naming::object_name;
use crate::capi::render::ClusterInput;

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("cannot create the cluster's application credential: {0}")]
    Keystone(#[from] KeystoneError),
    /// Resumed without the request's token and no credential stored yet.
    #[error("the cluster's application credential needs the create request's token")]
    NeedsRequest,
    #[error("reading the cluster's credentials Secret: {0}")]
    Kube(#[from] kube::Error),
}

#[derive(Clone)]
enum Source {
    Static {
        auth_url: String,
        id: String,
        secret: Secret,
    },
    Keystone(Keystone),
}

/// Where clusters' credentials come from, and how clouds.yaml uses them.
#[derive(Clone)]
pub struct Credentials {
    source: Source,
    region: Option<String>,
    /// clouds.yaml `interface`.
    pub interface: String,
    /// clouds.yaml `verify`.
    pub verify: bool,
    /// The CA bundle for the cloud's endpoints, if private.
    pub ca_file_content: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.source {
            Source::Static { .. } => "static",
            Source::Keystone(_) => "keystone",
        };
        f.debug_struct("Credentials")
            .field("source", &source)
            .field("interface", &self.interface)
            .finish()
    }
}

/// `key: value` of our own clouds.yaml (we wrote it; one key per line).
fn clouds_value(clouds: &str, key: &str) -> Option<String> {
    clouds.lines().find_map(|l| {
        let (k, v) = l.trim().split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

/// The application credential (id, secret, auth_url) in a clouds.yaml Secret.
fn stored(secret: &KubeSecret) -> Option<(String, Secret, String)> {
    let data = secret.data.as_ref()?.get("clouds.yaml")?;
    let text = String::from_utf8(data.0.clone()).ok()?;
    Some((
        clouds_value(&text, "application_credential_id")?,
        Secret::new(clouds_value(&text, "application_credential_secret")?),
        clouds_value(&text, "auth_url")?,
    ))
}

impl Credentials {
    pub fn from_opts(o: &CapiOpts, auth: &KeystoneAuthOpts) -> Result<Credentials, KeystoneError> {
        let source = match (&o.static_auth_url, &o.static_application_credential_id) {
            (Some(url), Some(id)) if !o.static_application_credential_secret.is_empty() => {
                Source::Static {
                    auth_url: url.clone(),
                    id: id.clone(),
                    secret: o.static_application_credential_secret.clone(),
                }
            }
            _ => Source::Keystone(Keystone::new(auth.clone())?),
        };
        let ca_file_content = o
            .ca_file
            .as_ref()
            .and_then(|p| match std::fs::read_to_string(p) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::error!(path = %p, error = %e, "cannot read [capi] ca_file");
                    None
                }
            });
        Ok(Credentials {
            source,
            region: o.region_name.clone(),
            interface: o.credentials_interface.clone(),
            verify: o.verify_ca,
            ca_file_content,
        })
    }

    fn cloud(&self, auth_url: String, id: String, secret: Secret) -> CloudConfig {
        CloudConfig {
            auth_url,
            region: self.region.clone(),
            application_credential_id: id,
            application_credential_secret: secret,
            ca_file_content: self.ca_file_content.clone(),
        }
    }

    /// The credentials for a cluster being created: the stored ones if a
    /// previous attempt wrote them, else new ones for the request's user.
    pub async fn for_cluster(
        &self,
        client: &kube::Client,
        input: &ClusterInput,
        cluster_name: &str,
        ctx: Option<&RequestContext>,
    ) -> Result<CloudConfig, CredentialError> {
        let keystone = match &self.source {
            Source::Static {
                auth_url,
                id,
                secret,
            } => return Ok(self.cloud(auth_url.clone(), id.clone(), secret.clone())),
            Source::Keystone(k) => k,
        };
        let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), &input.namespace);
        let name = object_name(&input.stack_id, "cloud-credentials");
        if let Some((id, secret, url)) =
            crate::mgmt::with_retries("read credentials", || secrets.get_opt(&name))
                .await?
                .as_ref()
                .and_then(stored)
        {
            return Ok(self.cloud(url, id, secret));
        }
        let ctx = ctx.ok_or(CredentialError::NeedsRequest)?;
        let ac = keystone
            .create(
                ctx,
                &format!("magnum-{}", input.cluster_uuid),
                &format!("Magnum cluster ({cluster_name})"),
            )
            .await?;
        tracing::info!(cluster = %input.cluster_uuid, application_credential = %ac.id, "application credential created");
        Ok(self.cloud(ac.auth_url, ac.id, ac.secret))
    }

    /// The conductor's own service token (`[keystone_auth]`), for the
    /// requests a service must vouch for; none with a static credential.
    pub async fn service_token(&self) -> Result<Secret, String> {
        match &self.source {
            Source::Keystone(k) => k.service_token_secret().await.map_err(|e| e.to_string()),
            Source::Static { .. } => Err(
                "the conductor has no [keystone_auth] credentials of its own (a static application credential)"
                    .into(),
            ),
        }
    }

    /// Whether credentials come from Keystone (else one static credential).
    pub fn rotatable(&self) -> bool {
        matches!(self.source, Source::Keystone(_))
    }

    /// The application credential stored for a cluster, if any: (id,
    /// secret, auth_url), from its credentials Secret.
    async fn stored_parts(
        client: &kube::Client,
        namespace: &str,
        stack_id: &str,
    ) -> Result<Option<(String, Secret, String)>, CredentialError> {
        let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), namespace);
        let name = object_name(stack_id, "cloud-credentials");
        Ok(
            crate::mgmt::with_retries("read credentials", || secrets.get_opt(&name))
                .await?
                .as_ref()
                .and_then(stored),
        )
    }

    /// The application credential stored for a cluster, if any: (id, auth_url).
    pub async fn stored_for(
        &self,
        client: &kube::Client,
        namespace: &str,
        stack_id: &str,
    ) -> Result<Option<(String, String)>, CredentialError> {
        Ok(Self::stored_parts(client, namespace, stack_id)
            .await?
            .map(|(id, _, url)| (id, url)))
    }

    /// The cloud configuration the cluster's addons were given (its stored
    /// application credential), to render them again (an upgrade whose
    /// labels change them). None: nothing stored.
    pub async fn stored_cloud(
        &self,
        client: &kube::Client,
        namespace: &str,
        stack_id: &str,
    ) -> Result<Option<CloudConfig>, CredentialError> {
        Ok(Self::stored_parts(client, namespace, stack_id)
            .await?
            .map(|(id, secret, url)| self.cloud(url, id, secret)))
    }

    /// A new application credential for the requesting user (rotation):
    /// named `magnum-<cluster uuid>-<short id>` (Keystone names are unique
    /// per user, and the old one still exists until it is replaced).
    pub async fn create_new(
        &self,
        input: &ClusterInput,
        cluster_name: &str,
        ctx: &RequestContext,
    ) -> Result<CloudConfig, CredentialError> {
        let Source::Keystone(keystone) = &self.source else {
            return Err(CredentialError::NeedsRequest);
        };
        let short = common::short_id::generate_id().to_ascii_lowercase();
        let ac = keystone
            .create(
                ctx,
                &format!("magnum-{}-{short}", input.cluster_uuid),
                &format!("Magnum cluster ({cluster_name})"),
            )
            .await?;
        tracing::info!(cluster = %input.cluster_uuid, application_credential = %ac.id, "application credential created (rotation)");
        Ok(self.cloud(ac.auth_url, ac.id, ac.secret))
    }

    /// Delete an application credential of `user` (the conductor's own
    /// `[keystone_auth]` credentials).
    pub async fn delete(&self, user: &str, id: &str) -> Result<(), CredentialError> {
        let Source::Keystone(keystone) = &self.source else {
            return Ok(());
        };
        keystone.delete(user, id).await?;
        Ok(())
    }

    /// The credential a cluster's clean-up reaches OpenStack with: the
    /// static one, or the application credential in its clouds.yaml
    /// Secret (`None`: no Secret, so nothing was ever made with it).
    pub async fn cloud_credential(
        &self,
        client: &kube::Client,
        namespace: &str,
        stack_id: &str,
    ) -> Result<Option<crate::cloud::api::Credential>, CredentialError> {
        let (auth_url, id, secret) = match &self.source {
            Source::Static {
                auth_url,
                id,
                secret,
            } => (auth_url.clone(), id.clone(), secret.clone()),
            Source::Keystone(_) => {
                let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), namespace);
                let name = object_name(stack_id, "cloud-credentials");
                match crate::mgmt::with_retries("read credentials", || secrets.get_opt(&name))
                    .await?
                    .as_ref()
                    .and_then(stored)
                {
                    Some((id, secret, url)) => (url, id, secret),
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(crate::cloud::api::Credential {
            auth_url,
            id,
            secret,
            interface: self.interface.clone(),
            region: self.region.clone(),
        }))
    }

    /// Delete a deleted cluster's application credential (read from its
    /// Secret in `namespace`). Static credentials are shared: kept.
    pub async fn release(
        &self,
        client: &kube::Client,
        namespace: &str,
        cluster: &MagnumObject,
    ) -> Result<(), CredentialError> {
        let Source::Keystone(keystone) = &self.source else {
            return Ok(());
        };
        let Some(stack_id) = cluster.get_str("stack_id") else {
            return Ok(());
        };
        let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), namespace);
        // An adopted vexxhost cluster's credential is in its driver's
        // secret (`<stack_id>-cloud-config`, the same clouds.yaml shape).
        let suffix = if super::rows::adopted_namespace(cluster).is_some() {
            "cloud-config"
        } else {
            "cloud-credentials"
        };
        let name = object_name(stack_id, suffix);
        let Some((id, _, _)) =
            crate::mgmt::with_retries("read credentials", || secrets.get_opt(&name))
                .await?
                .as_ref()
                .and_then(stored)
        else {
            return Ok(());
        };
        let user = cluster.get_str("user_id").unwrap_or_default();
        keystone.delete(user, &id).await?;
        tracing::info!(cluster = %cluster.get_str("uuid").unwrap_or_default(), application_credential = %id, "application credential deleted");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_our_clouds_yaml() {
        let clouds = "clouds:\n  openstack:\n    auth:\n      auth_url: https://k:5000/v3\n      application_credential_id: abc\n      application_credential_secret: s3:cret\n    auth_type: v3applicationcredential\n";
        let mut data = std::collections::BTreeMap::new();
        data.insert(
            "clouds.yaml".to_string(),
            k8s_openapi::ByteString(clouds.as_bytes().to_vec()),
        );
        let s = KubeSecret {
            data: Some(data),
            ..Default::default()
        };
        let (id, secret, url) = stored(&s).unwrap();
        assert_eq!((id.as_str(), url.as_str()), ("abc", "https://k:5000/v3"));
        assert_eq!(secret.expose(), "s3:cret");
        assert!(stored(&KubeSecret::default()).is_none());
    }
}
