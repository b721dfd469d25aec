//! Magnum's database, exactly as Magnum 20-23 read and write it.
//!
//! - [`url`]: `[database] connection` (SQLAlchemy/PyMySQL syntax) to sqlx.
//! - [`schema`]: supported alembic heads, optional columns, and building a
//!   fresh schema from `migrations/` (only into an empty database).
//! - [`model`]: pure mapping between table rows and Magnum objects (JSON
//!   columns, booleans, naive-UTC timestamps), tested without a database.
//! - [`repo`]: reads and writes with Magnum's semantics (tenant scoping,
//!   identity lookups, changed-columns-only updates under `FOR UPDATE`,
//!   deadlock retries, Magnum exception classes).
//! - [`service`]: the `magnum_service` heartbeat.

pub mod model;
pub mod repo;
pub mod schema;
pub mod service;
pub mod url;

use std::time::Duration;

use rpc_schema::failure::RemoteFailure;
use serde_json::{Map, Value};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

use crate::config::DatabaseOpts;
pub use schema::SchemaInfo;
pub use url::{DbUrl, DbUrlError, TlsMode};

/// Errors of the data layer. `Display` never holds a password.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Url(#[from] DbUrlError),
    #[error("cannot connect to the database {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("database schema: {0}")]
    Schema(String),
    /// A Magnum exception (not found, already exists, invalid identity...).
    #[error("{class}: {message}")]
    Magnum {
        class: &'static str,
        message: String,
        kwargs: Map<String, Value>,
    },
    /// A row that does not hold what Magnum would have written.
    #[error("table {table} row {id}: column {column}: {reason}")]
    Data {
        table: &'static str,
        id: String,
        column: &'static str,
        reason: String,
    },
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
}

impl DbError {
    pub fn magnum(class: &'static str, kwargs: &[(&str, &str)]) -> DbError {
        let kwargs: Map<String, Value> = kwargs
            .iter()
            .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
            .collect();
        let message = kwargs
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(", ");
        DbError::Magnum {
            class,
            message,
            kwargs,
        }
    }

    /// MySQL error number, if the server sent one.
    pub fn mysql_code(&self) -> Option<u16> {
        match self {
            DbError::Sql(sqlx::Error::Database(e)) => e
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number()),
            _ => None,
        }
    }

    /// Deadlock (1213, also Galera certification failures) or lock wait
    /// timeout (1205): retried like oslo.db's `retry_on_deadlock`.
    pub fn is_deadlock(&self) -> bool {
        matches!(self.mysql_code(), Some(1213 | 1205))
    }

    /// The database could not be reached or could not serve the request now
    /// (connection refused or lost, pool exhausted, server going away, too
    /// many connections, deadlocks left after retrying, read-only while a
    /// Galera node resyncs): trying again later may succeed. A protocol
    /// error is a connection whose byte stream broke off mid-packet (cut
    /// during a reply: the next packet is out of sequence or short), as
    /// PyMySQL's "Packet sequence number wrong" is an OperationalError to
    /// oslo.db; the pool drops that connection. Data, schema and Magnum
    /// errors are not transient.
    pub fn is_transient(&self) -> bool {
        match self {
            DbError::Connect { .. } => true,
            DbError::Sql(
                sqlx::Error::Io(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Tls(_),
            ) => true,
            DbError::Sql(sqlx::Error::Database(_)) => matches!(
                self.mysql_code(),
                // deadlock, lock wait, too many connections, server shutdown,
                // gone away, lost, read-only, WSREP not ready
                Some(1213 | 1205 | 1040 | 1053 | 2006 | 2013 | 1290 | 1836 | 1047)
            ),
            _ => false,
        }
    }

    /// How the RPC layer reports it: Magnum classes as themselves, anything
    /// else as Python's oslo.db would surface it (`oslo_db.exception.DBError`,
    /// which the API re-raises as a RemoteError, as with Python's conductor).
    pub fn to_failure(&self) -> RemoteFailure {
        match self {
            DbError::Magnum { class, kwargs, .. } => RemoteFailure::magnum(class, kwargs.clone()),
            other => {
                let message = other.to_string();
                RemoteFailure {
                    class: "DBError".into(),
                    module: "oslo_db.exception".into(),
                    args: vec![Value::String(message.clone())],
                    message,
                    kwargs: Box::default(),
                }
            }
        }
    }
}

/// The process's one pool plus what the schema looks like.
#[derive(Clone)]
pub struct Db {
    pub pool: MySqlPool,
    pub schema: SchemaInfo,
    retry: RetryPolicy,
}

/// oslo.db's `db_max_retries`, `db_retry_interval`, `db_inc_retry_interval`,
/// `db_max_retry_interval`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_retries: usize,
    pub interval: Duration,
    pub increase: bool,
    pub max_interval: Duration,
}

impl RetryPolicy {
    pub fn from_opts(o: &DatabaseOpts) -> RetryPolicy {
        RetryPolicy {
            max_retries: o.db_max_retries,
            interval: Duration::from_secs_f64(o.db_retry_interval),
            increase: o.db_inc_retry_interval,
            max_interval: Duration::from_secs_f64(o.db_max_retry_interval),
        }
    }
}

impl Db {
    /// Connect (retrying like oslo.db's `max_retries`/`retry_interval`) and
    /// check the schema revision. Never creates or alters anything.
    pub async fn connect(opts: &DatabaseOpts) -> Result<Db, DbError> {
        let pool = connect_pool(opts).await?;
        let schema = SchemaInfo::load(&pool).await?;
        Ok(Db {
            pool,
            schema,
            retry: RetryPolicy::from_opts(opts),
        })
    }

    /// Wrap an existing pool (tests, tools).
    pub async fn from_pool(pool: MySqlPool, retry: RetryPolicy) -> Result<Db, DbError> {
        let schema = SchemaInfo::load(&pool).await?;
        Ok(Db {
            pool,
            schema,
            retry,
        })
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Run `op` (one whole transaction) again on deadlock, as oslo.db does.
    pub async fn retry_on_deadlock<T, F, Fut>(&self, what: &str, op: F) -> Result<T, DbError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, DbError>>,
    {
        retry_on_deadlock(self.retry, what, op).await
    }
}

/// See [`Db::retry_on_deadlock`].
pub async fn retry_on_deadlock<T, F, Fut>(
    policy: RetryPolicy,
    what: &str,
    op: F,
) -> Result<T, DbError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DbError>>,
{
    use backon::Retryable;
    let mut b = backon::ExponentialBuilder::default()
        .with_min_delay(policy.interval)
        .with_max_delay(policy.max_interval.max(policy.interval))
        .with_max_times(policy.max_retries);
    if !policy.increase {
        b = b.with_factor(1.0);
    }
    op.retry(b)
        .sleep(tokio::time::sleep)
        .when(DbError::is_deadlock)
        .notify(|e, after| {
            tracing::warn!(operation = what, error = %e, retry_in = ?after, "database deadlock, retrying")
        })
        .await
}

async fn connect_pool(opts: &DatabaseOpts) -> Result<MySqlPool, DbError> {
    let url = DbUrl::parse(opts.connection.expose())?;
    for p in &url.ignored {
        tracing::warn!(parameter = %p, "[database] connection parameter has no effect here, ignored");
    }
    if url.tls == TlsMode::Required {
        tracing::warn!("[database] connection asks for TLS without certificate verification");
    }
    let pool_opts = MySqlPoolOptions::new()
        .max_connections((opts.max_pool_size + opts.max_overflow).max(1))
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(opts.pool_timeout))
        .max_lifetime(Some(Duration::from_secs(opts.connection_recycle_time)));
    let connect = url.connect_options();
    let mut attempt = 0usize;
    loop {
        match pool_opts.clone().connect_with(connect.clone()).await {
            Ok(pool) => return Ok(pool),
            Err(e) => {
                // Access denied is not going to improve with time.
                let fatal = matches!(&e, sqlx::Error::Database(d) if d.code().as_deref() == Some("28000"))
                    || matches!(&e, sqlx::Error::Tls(_) | sqlx::Error::Configuration(_));
                if fatal || opts.max_retries >= 0 && attempt >= opts.max_retries as usize {
                    return Err(DbError::Connect {
                        url: url.redacted(),
                        reason: one_line(&e.to_string()),
                    });
                }
                attempt += 1;
                tracing::warn!(database = %url.redacted(), error = %one_line(&e.to_string()), attempt, "database not reachable, retrying");
                tokio::time::sleep(Duration::from_secs(opts.retry_interval)).await;
            }
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_keep_magnum_classes() {
        let f = DbError::magnum("ClusterNotFound", &[("cluster", "abc")]).to_failure();
        assert_eq!(
            (f.class.as_str(), f.module.as_str()),
            ("ClusterNotFound", "magnum.common.exception")
        );
        assert_eq!(f.http_code(), 404);
        let f = DbError::Schema("x".into()).to_failure();
        assert_eq!(
            (f.class.as_str(), f.module.as_str()),
            ("DBError", "oslo_db.exception")
        );
    }

    #[test]
    fn transient_errors_are_the_ones_worth_retrying() {
        assert!(
            DbError::Connect {
                url: "u".into(),
                reason: "refused".into()
            }
            .is_transient()
        );
        assert!(DbError::Sql(sqlx::Error::PoolTimedOut).is_transient());
        assert!(
            DbError::Sql(sqlx::Error::Io(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset
            )))
            .is_transient()
        );
        assert!(
            DbError::Sql(sqlx::Error::Protocol("expected sequence 1, got 0".into())).is_transient()
        );
        assert!(!DbError::Schema("x".into()).is_transient());
        assert!(!DbError::magnum("ClusterNotFound", &[]).is_transient());
        assert!(
            !DbError::Data {
                table: "cluster",
                id: "1".into(),
                column: "labels",
                reason: "not JSON".into()
            }
            .is_transient()
        );
        assert!(!DbError::Sql(sqlx::Error::RowNotFound).is_transient());
    }

    #[test]
    fn connect_errors_hide_the_password() {
        let url = DbUrl::parse("mysql+pymysql://magnum:Top-Secret@db/magnum").unwrap();
        let e = DbError::Connect {
            url: url.redacted(),
            reason: "refused".into(),
        };
        assert!(!e.to_string().contains("Top-Secret"));
        assert!(!format!("{e:?} {url:?}").contains("Top-Secret"));
    }
}
