//! The OpenStack credentials a cluster's CAPO and cloud-provider pods use.
//!
//! Production design (issue 6, part 4): one Keystone application credential
//! per cluster, created for the requesting user from the RPC context and
//! deleted with the cluster. That Keystone client is NOT implemented yet.
//! Until it is, the only source is an operator-supplied application
//! credential in `[capi] static_*` (for test and demo deployments: every
//! cluster then shares it). Without it a create fails with a reason saying
//! exactly this, instead of creating a cluster CAPO cannot authenticate.

use common::config::CapiOpts;
use common::secret::Secret;
use rpc_schema::context::RequestContext;
use rpc_schema::ovo::MagnumObject;

use crate::capi::addons::CloudConfig;
use crate::capi::render::ClusterInput;

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "per-cluster Keystone application credentials are not implemented by this conductor yet; \
         set [capi] static_auth_url, static_application_credential_id and \
         static_application_credential_secret (shared by all clusters)"
    )]
    NotConfigured,
}

#[derive(Clone)]
enum Source {
    Static {
        auth_url: String,
        region: Option<String>,
        id: String,
        secret: Secret,
    },
    None,
}

/// Where clusters' credentials come from, and how clouds.yaml uses them.
#[derive(Clone)]
pub struct Credentials {
    source: Source,
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
            Source::None => "none",
        };
        f.debug_struct("Credentials")
            .field("source", &source)
            .field("interface", &self.interface)
            .finish()
    }
}

impl Credentials {
    pub fn from_opts(o: &CapiOpts) -> Credentials {
        let source = match (&o.static_auth_url, &o.static_application_credential_id) {
            (Some(url), Some(id)) if !o.static_application_credential_secret.is_empty() => {
                Source::Static {
                    auth_url: url.clone(),
                    region: o.static_region.clone(),
                    id: id.clone(),
                    secret: o.static_application_credential_secret.clone(),
                }
            }
            _ => Source::None,
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
        Credentials {
            source,
            interface: o.credentials_interface.clone(),
            verify: o.verify_ca,
            ca_file_content,
        }
    }

    /// The credentials for a cluster being created.
    pub async fn for_cluster(
        &self,
        _client: &kube::Client,
        _input: &ClusterInput,
        _ctx: Option<&RequestContext>,
    ) -> Result<CloudConfig, CredentialError> {
        match &self.source {
            Source::Static {
                auth_url,
                region,
                id,
                secret,
            } => Ok(CloudConfig {
                auth_url: auth_url.clone(),
                region: region.clone(),
                application_credential_id: id.clone(),
                application_credential_secret: secret.clone(),
                ca_file_content: self.ca_file_content.clone(),
            }),
            Source::None => Err(CredentialError::NotConfigured),
        }
    }

    /// Release a deleted cluster's credentials (static ones are shared: kept).
    pub async fn release(
        &self,
        _client: &kube::Client,
        _namespace: &str,
        _cluster: &MagnumObject,
    ) -> Result<(), CredentialError> {
        Ok(())
    }
}
