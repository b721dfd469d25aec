//! Why a step of a cluster operation failed ([`StepError`]): what the
//! operations, the engine and the step runner all return. It lives apart
//! from them so that each can use it without importing the others (the
//! engine never imports the runner; the runner drives the engine).

use common::db::DbError;
use rpc_schema::RemoteFailure;

use super::credentials::CredentialError;
use crate::mgmt::MgmtError;

/// Why a step failed: becomes `status_reason` (or the reply).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// Refused before anything changed: answered as is, nothing recorded.
    #[error("{}", .0.message)]
    Refused(RemoteFailure),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Db(#[from] DbError),
    #[error("{0}")]
    Mgmt(#[from] MgmtError),
    #[error("{0}")]
    Credentials(#[from] CredentialError),
    #[error("{0}")]
    Certificates(String),
    /// The cluster's Lease could not be had in time (another conductor is
    /// changing it, or the management cluster did not answer): nothing
    /// was done.
    #[error("cluster {cluster} cannot be changed now: {why}; try again")]
    Busy { cluster: String, why: String },
}

impl From<kube::Error> for StepError {
    fn from(e: kube::Error) -> StepError {
        StepError::Mgmt(MgmtError::Api(e))
    }
}

impl StepError {
    /// The database is unavailable: not the operation's fault.
    pub fn is_transient_db(&self) -> bool {
        matches!(self, StepError::Db(d) if d.is_transient())
    }

    /// The failure a call's reply carries (casts only log it).
    pub fn to_failure(&self) -> RemoteFailure {
        match self {
            StepError::Refused(f) => f.clone(),
            StepError::Db(d) => d.to_failure(),
            StepError::Invalid(m) | StepError::Certificates(m) => {
                RemoteFailure::invalid_parameter(m)
            }
            StepError::Busy { .. } => RemoteFailure::magnum_with_message(
                "Conflict",
                &self.to_string(),
                serde_json::Map::new(),
            ),
            other => RemoteFailure::magnum_with_message(
                "MagnumException",
                &other.to_string(),
                serde_json::Map::new(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        let f =
            StepError::Refused(RemoteFailure::not_supported("Upgrading a cluster")).to_failure();
        assert_eq!(f.class, "NotSupported");
        let f = StepError::Invalid("bad".into()).to_failure();
        assert_eq!(
            (f.class.as_str(), f.http_code()),
            ("InvalidParameterValue", 400)
        );
        let f = StepError::Mgmt(MgmtError::Malformed("kind")).to_failure();
        assert_eq!((f.class.as_str(), f.http_code()), ("MagnumException", 500));
    }
}
