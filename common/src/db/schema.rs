//! Which Magnum schema we are talking to, and building one from scratch.
//!
//! Magnum's alembic migrations own production schemas. At startup we only
//! read `alembic_version` and refuse revisions we do not know. The SQL in
//! `migrations/` reproduces Magnum's heads for tests, the demo and fresh
//! installs, and [`create_fresh`] applies it only to an empty database.

use sqlx::{MySqlPool, Row};

use super::DbError;

/// Magnum 18.x-22.x: cluster trust columns, no nodegroup labels/taints.
pub const REV_22: &str = "c0f832afc4fd";
/// Magnum 23.0.0 migration 1: trust columns dropped.
pub const REV_23_NO_TRUST: &str = "d7e6a4d39fe4";
/// Magnum 23.0.0 head: nodegroup `node_labels` and `node_taints`.
pub const REV_23: &str = "b3e1cf4a2d5e";
/// Every head we can serve.
pub const SUPPORTED: &[&str] = &[REV_22, REV_23_NO_TRUST, REV_23];

/// The migrations, in order: (revision reached, SQL).
const STEPS: &[(&str, &str)] = &[
    (
        REV_22,
        include_str!("../../../migrations/0001_c0f832afc4fd_magnum_22_head.sql"),
    ),
    (
        REV_23_NO_TRUST,
        include_str!("../../../migrations/0002_d7e6a4d39fe4_drop_trust_columns.sql"),
    ),
    (
        REV_23,
        include_str!("../../../migrations/0003_b3e1cf4a2d5e_nodegroup_labels_taints.sql"),
    ),
];

/// What the connected database looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaInfo {
    pub revision: String,
    /// `cluster.trust_id` and the trustee columns (Magnum <= 22).
    pub has_trust_columns: bool,
    /// `nodegroup.node_labels` / `node_taints` (Magnum >= 23).
    pub has_node_labels: bool,
}

/// Is this revision one we serve? The error names it and the supported ones.
pub fn check_revision(revisions: &[String]) -> Result<&str, DbError> {
    match revisions {
        [] => Err(DbError::Schema(format!(
            "alembic_version is empty; run `magnum-db-manage upgrade` (supported revisions: {})",
            SUPPORTED.join(", ")
        ))),
        [one] => SUPPORTED
            .iter()
            .find(|s| **s == one.as_str())
            .copied()
            .ok_or_else(|| {
                DbError::Schema(format!(
                    "unsupported Magnum schema revision {one:?} (supported: {} = Magnum 18-22, {} and {} = Magnum 23.0)",
                    REV_22, REV_23_NO_TRUST, REV_23
                ))
            }),
        many => Err(DbError::Schema(format!(
            "alembic_version holds several heads ({}); supported: {}",
            many.join(", "),
            SUPPORTED.join(", ")
        ))),
    }
}

impl SchemaInfo {
    pub async fn load(pool: &MySqlPool) -> Result<SchemaInfo, DbError> {
        let revisions: Vec<String> = match sqlx::query("SELECT version_num FROM alembic_version")
            .fetch_all(pool)
            .await
        {
            Ok(rows) => rows
                .iter()
                .map(|r| r.try_get::<String, _>(0))
                .collect::<Result<_, _>>()?,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42S02") => {
                return Err(DbError::Schema(
                    "no alembic_version table: this is not a Magnum database (run `magnum-db-manage upgrade`)".into(),
                ));
            }
            Err(e) => return Err(e.into()),
        };
        let revision = check_revision(&revisions)?.to_string();
        let columns: Vec<(String, String)> = sqlx::query(
            "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('cluster', 'nodegroup')",
        )
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Ok((r.try_get::<String, _>(0)?, r.try_get::<String, _>(1)?)))
        .collect::<Result<_, sqlx::Error>>()?;
        let has = |t: &str, c: &str| columns.iter().any(|(a, b)| a == t && b == c);
        Ok(SchemaInfo {
            revision,
            has_trust_columns: has("cluster", "trust_id"),
            has_node_labels: has("nodegroup", "node_labels") && has("nodegroup", "node_taints"),
        })
    }
}

/// Build Magnum's schema at `target` (one of [`SUPPORTED`]) in an *empty*
/// database. Refuses if any table exists: we never migrate a database that
/// Magnum's own tooling owns.
pub async fn create_fresh(pool: &MySqlPool, target: &str) -> Result<(), DbError> {
    let upto = STEPS
        .iter()
        .position(|(rev, _)| *rev == target)
        .ok_or_else(|| DbError::Schema(format!("unknown target revision {target:?}")))?;
    let tables: i64 = sqlx::query(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()",
    )
    .fetch_one(pool)
    .await?
    .try_get(0)?;
    if tables > 0 {
        return Err(DbError::Schema(format!(
            "refusing to create the schema: the database already has {tables} tables"
        )));
    }
    for (rev, sql) in &STEPS[..=upto] {
        sqlx::raw_sql(*sql)
            .execute(pool)
            .await
            .map_err(|e| DbError::Schema(format!("applying {rev}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions() {
        assert_eq!(check_revision(&[REV_23.into()]).unwrap(), REV_23);
        assert_eq!(check_revision(&[REV_22.into()]).unwrap(), REV_22);
        let e = check_revision(&["7da8489d6a68".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("7da8489d6a68") && e.contains(REV_23) && e.contains(REV_22),
            "{e}"
        );
        assert!(check_revision(&[]).is_err());
        assert!(check_revision(&[REV_22.into(), REV_23.into()]).is_err());
    }

    #[test]
    fn migrations_stamp_their_revision() {
        for (rev, sql) in STEPS {
            assert!(sql.contains(&format!("'{rev}'")), "{rev}");
        }
    }
}
