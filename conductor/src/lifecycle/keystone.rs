//! Keystone application credentials for clusters (thin HTTP adapter).
//!
//! - Create: with the requesting user's token (from the RPC context), `POST
//!   /v3/users/{user}/application_credentials` on the identity endpoint of
//!   the token's catalog (else `[keystone_auth] auth_url`). Keystone's
//!   policy lets only the user create their own; the credential inherits
//!   the token's project roles and is restricted (cannot make more).
//! - Delete: once the cluster is gone (the user's token may have expired by
//!   then), with the conductor's own `[keystone_auth]` credentials.
//!
//! Tokens, passwords and credential secrets are [`Secret`]s: never logged.

use std::sync::Arc;

use common::config::KeystoneAuthOpts;
use common::secret::Secret;
use http::{Method, StatusCode};
use rpc_schema::context::RequestContext;
use serde_json::{Value, json};

use crate::cloud::api::{ApiError, JsonHttp};

#[derive(Debug, thiserror::Error)]
pub enum KeystoneError {
    #[error("Keystone {what}: HTTP {status}: {message}")]
    Status {
        what: &'static str,
        status: u16,
        message: String,
    },
    #[error("Keystone {what}: {reason}")]
    Transport { what: &'static str, reason: String },
    #[error("Keystone: {0}")]
    Config(String),
}

/// One HTTP client for every Keystone call of the process
/// ([`JsonHttp`], shared with the cloud clean-up's client).
#[derive(Clone)]
pub struct Keystone {
    http: JsonHttp,
    auth: Arc<KeystoneAuthOpts>,
}

/// A created application credential.
#[derive(Clone)]
pub struct AppCredential {
    pub id: String,
    pub secret: Secret,
    /// The public identity endpoint (for clouds.yaml).
    pub auth_url: String,
}

impl std::fmt::Debug for AppCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppCredential")
            .field("id", &self.id)
            .field("auth_url", &self.auth_url)
            .finish_non_exhaustive()
    }
}

/// The identity endpoint of a token's catalog (`interface`), if any.
pub fn identity_endpoint(token_info: Option<&Value>, interface: &str) -> Option<String> {
    let catalog = token_info?.pointer("/token/catalog")?.as_array()?;
    let identity = catalog.iter().find(|s| s["type"] == "identity")?;
    identity["endpoints"]
        .as_array()?
        .iter()
        .find(|e| e["interface"] == interface)
        .and_then(|e| e["url"].as_str())
        .map(|u| u.trim_end_matches('/').to_string())
}

/// `<base>/v3/<path>` whether or not the base already ends in `/v3`.
fn v3(base: &str, path: &str) -> String {
    let b = base.trim_end_matches('/');
    let b = b.strip_suffix("/v3").unwrap_or(b);
    format!("{b}/v3/{path}")
}

impl Keystone {
    pub fn new(auth: KeystoneAuthOpts) -> Result<Keystone, KeystoneError> {
        Ok(Keystone {
            http: JsonHttp::new(auth.cafile.as_deref()).map_err(KeystoneError::Config)?,
            auth: Arc::new(auth),
        })
    }

    async fn send(
        &self,
        what: &'static str,
        method: Method,
        url: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Result<(StatusCode, http::HeaderMap, Value), KeystoneError> {
        self.http
            .send(what, method, url, token, body)
            .await
            .map_err(|e| match e {
                ApiError::Status {
                    status, message, ..
                } => KeystoneError::Status {
                    what,
                    status,
                    message,
                },
                ApiError::Transport { reason, .. } => KeystoneError::Transport { what, reason },
                ApiError::Config(m) => KeystoneError::Config(m),
            })
    }

    /// The public identity endpoint for a request (catalog, else config).
    pub fn public_endpoint(&self, ctx: Option<&RequestContext>) -> Option<String> {
        identity_endpoint(ctx.and_then(RequestContext::auth_token_info), "public")
            .or_else(|| ctx.and_then(RequestContext::auth_url).map(str::to_string))
            .or_else(|| self.auth.auth_url.clone())
    }

    /// Create an application credential for the context's user, named
    /// `name`; an existing one of that name (an interrupted earlier
    /// attempt, whose secret is lost) is deleted and made again.
    pub async fn create(
        &self,
        ctx: &RequestContext,
        name: &str,
        description: &str,
    ) -> Result<AppCredential, KeystoneError> {
        let token = ctx
            .auth_token()
            .ok_or_else(|| KeystoneError::Config("the request carries no Keystone token".into()))?;
        let user = ctx
            .user_id()
            .ok_or_else(|| KeystoneError::Config("the request carries no user id".into()))?;
        let endpoint = self.public_endpoint(Some(ctx)).ok_or_else(|| {
            KeystoneError::Config(
                "no identity endpoint: none in the token's catalog and no [keystone_auth] auth_url"
                    .into(),
            )
        })?;
        let url = v3(&endpoint, &format!("users/{user}/application_credentials"));
        let body = json!({"application_credential": {"name": name, "description": description}});
        let result = self
            .send(
                "application credential create",
                Method::POST,
                &url,
                Some(token),
                Some(&body),
            )
            .await;
        let created = match result {
            Err(KeystoneError::Status { status: 409, .. }) => {
                let list_url = format!("{url}?name={name}");
                let (_, _, found) = self
                    .send(
                        "application credential lookup",
                        Method::GET,
                        &list_url,
                        Some(token),
                        None,
                    )
                    .await?;
                for ac in found["application_credentials"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(id) = ac["id"].as_str() {
                        self.send(
                            "application credential delete",
                            Method::DELETE,
                            &format!("{url}/{id}"),
                            Some(token),
                            None,
                        )
                        .await?;
                    }
                }
                self.send(
                    "application credential create",
                    Method::POST,
                    &url,
                    Some(token),
                    Some(&body),
                )
                .await?
                .2
            }
            other => other?.2,
        };
        let ac = &created["application_credential"];
        match (ac["id"].as_str(), ac["secret"].as_str()) {
            (Some(id), Some(secret)) => Ok(AppCredential {
                id: id.to_string(),
                secret: Secret::new(secret),
                auth_url: endpoint,
            }),
            _ => Err(KeystoneError::Transport {
                what: "application credential create",
                reason: "the answer has no id or secret".into(),
            }),
        }
    }

    /// `check`: the conductor's own credentials get a token (what was
    /// authenticated, never the token).
    pub async fn check(&self) -> Result<String, KeystoneError> {
        let (url, _token) = self.service_token().await?;
        let who = self
            .auth
            .username
            .as_deref()
            .or(self.auth.user_id.as_deref())
            .unwrap_or("?");
        Ok(format!("{url}: a token issued for {who}"))
    }

    /// The conductor's own token, sent as `X-Service-Token` where a
    /// service must vouch for a request (a stale volume attachment's
    /// delete: Cinder's `is_service_request`, its `[service_user]
    /// service_token_roles`).
    pub async fn service_token_secret(&self) -> Result<Secret, KeystoneError> {
        Ok(self.service_token().await?.1)
    }

    /// A token for the conductor itself (`[keystone_auth]`, password).
    async fn service_token(&self) -> Result<(String, Secret), KeystoneError> {
        let a = &self.auth;
        let url = a
            .auth_url
            .as_deref()
            .ok_or_else(|| KeystoneError::Config("[keystone_auth] auth_url is not set".into()))?;
        let mut user = json!({"password": a.password.expose()});
        match (&a.user_id, &a.username) {
            (Some(id), _) => user["id"] = json!(id),
            (None, Some(name)) => {
                user["name"] = json!(name);
                user["domain"] = match (&a.user_domain_id, &a.user_domain_name) {
                    (Some(id), _) => json!({"id": id}),
                    (None, Some(n)) => json!({"name": n}),
                    _ => json!({"id": "default"}),
                };
            }
            _ => {
                return Err(KeystoneError::Config(
                    "[keystone_auth] needs username or user_id".into(),
                ));
            }
        }
        let scope = if a.system_scope.is_some() {
            json!({"system": {"all": true}})
        } else {
            let mut p = json!({});
            match (&a.project_id, &a.project_name) {
                (Some(id), _) => p["id"] = json!(id),
                (None, Some(n)) => {
                    p["name"] = json!(n);
                    p["domain"] = match (&a.project_domain_id, &a.project_domain_name) {
                        (Some(id), _) => json!({"id": id}),
                        (None, Some(n)) => json!({"name": n}),
                        _ => json!({"id": "default"}),
                    };
                }
                _ => {
                    return Err(KeystoneError::Config(
                        "[keystone_auth] needs project_name, project_id or system_scope".into(),
                    ));
                }
            }
            json!({"project": p})
        };
        let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": user}}, "scope": scope}});
        let (_, headers, _) = self
            .send(
                "service token",
                Method::POST,
                &v3(url, "auth/tokens"),
                None,
                Some(&body),
            )
            .await?;
        let token = headers
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| KeystoneError::Transport {
                what: "service token",
                reason: "no X-Subject-Token header".into(),
            })?;
        Ok((url.to_string(), Secret::new(token)))
    }

    /// Delete `user`'s application credential `id` with the conductor's
    /// credentials. Already gone is success.
    pub async fn delete(&self, user: &str, id: &str) -> Result<(), KeystoneError> {
        let (url, token) = self.service_token().await?;
        let target = v3(&url, &format!("users/{user}/application_credentials/{id}"));
        match self
            .send(
                "application credential delete",
                Method::DELETE,
                &target,
                Some(token.expose()),
                None,
            )
            .await
        {
            Ok(_) | Err(KeystoneError::Status { status: 404, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        let info = json!({"token": {"catalog": [
            {"type": "compute", "endpoints": [{"interface": "public", "url": "http://nova"}]},
            {"type": "identity", "endpoints": [
                {"interface": "internal", "url": "http://10.0.0.1:5000/v3"},
                {"interface": "public", "url": "https://keystone.example.com/v3/"}]}]}});
        assert_eq!(
            identity_endpoint(Some(&info), "public").as_deref(),
            Some("https://keystone.example.com/v3")
        );
        assert_eq!(identity_endpoint(Some(&json!({})), "public"), None);
        assert_eq!(
            v3("https://k/v3", "auth/tokens"),
            "https://k/v3/auth/tokens"
        );
        assert_eq!(v3("https://k/", "auth/tokens"), "https://k/v3/auth/tokens");
        assert_eq!(v3("https://k/identity", "x"), "https://k/identity/v3/x");
    }
}
