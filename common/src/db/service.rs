//! The `magnum_service` heartbeat (magnum/servicegroup/magnum_service_periodic.py).
//!
//! First beat: find the row for (`[DEFAULT] host`, `magnum-conductor`) —
//! `host IS NULL` when no host is configured — and INSERT it if missing
//! (report_count 0, disabled 0, forced_down 0). Every beat: report_count + 1,
//! `last_seen_up` and `updated_at` = utcnow. Several processes on one host
//! share the row; the increment is done in SQL so no beat is lost (Python's
//! read-modify-write can lose one, with no visible difference to the API).

use sqlx::{AssertSqlSafe, Row};

use super::model;
use super::{Db, DbError};

pub const BINARY: &str = "magnum-conductor";

/// The heartbeat of one process; keeps the row id between beats.
#[derive(Debug)]
pub struct Heartbeat {
    host: Option<String>,
    id: Option<i64>,
}

impl Heartbeat {
    pub fn new(host: Option<String>) -> Heartbeat {
        Heartbeat { host, id: None }
    }

    fn host_cond(&self) -> (&'static str, Option<String>) {
        match &self.host {
            Some(h) => ("`host` = ?", Some(h.clone())),
            None => ("`host` IS NULL", None),
        }
    }

    async fn find(&self, db: &Db) -> Result<Option<i64>, DbError> {
        let (cond, host) = self.host_cond();
        let sql = format!(
            "SELECT `id` FROM `magnum_service` WHERE {cond} AND `binary` = ? ORDER BY `id` LIMIT 1"
        );
        let mut q = sqlx::query(AssertSqlSafe(sql));
        if let Some(h) = host {
            q = q.bind(h);
        }
        let row = q.bind(BINARY).fetch_optional(&db.pool).await?;
        Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?)
    }

    async fn ensure_row(&mut self, db: &Db) -> Result<i64, DbError> {
        if let Some(id) = self.id {
            return Ok(id);
        }
        if let Some(id) = self.find(db).await? {
            self.id = Some(id);
            return Ok(id);
        }
        let inserted = sqlx::query(
            "INSERT INTO `magnum_service` (`created_at`, `report_count`, `host`, `binary`, `disabled`, `forced_down`) \
             VALUES (?, 0, ?, ?, 0, 0)",
        )
        .bind(model::utcnow())
        .bind(self.host.clone())
        .bind(BINARY)
        .execute(&db.pool)
        .await
        .map_err(DbError::from);
        let id = match inserted {
            Ok(done) => done.last_insert_id() as i64,
            // Another process of this host won the race: share its row.
            Err(e) if e.mysql_code() == Some(1062) => self.find(db).await?.ok_or_else(|| {
                DbError::Schema("magnum_service row vanished after a duplicate insert".into())
            })?,
            Err(e) => return Err(e),
        };
        self.id = Some(id);
        Ok(id)
    }

    /// One beat. Returns the row id.
    pub async fn beat(&mut self, db: &Db) -> Result<i64, DbError> {
        let id = self.ensure_row(db).await?;
        let now = model::utcnow();
        let done = db
            .retry_on_deadlock("magnum_service heartbeat", || async move {
                Ok(sqlx::query(
                    "UPDATE `magnum_service` SET `report_count` = `report_count` + 1, \
                     `last_seen_up` = ?, `updated_at` = ? WHERE `id` = ?",
                )
                .bind(now)
                .bind(now)
                .bind(id)
                .execute(&db.pool)
                .await?)
            })
            .await?;
        if done.rows_affected() == 0 {
            // Deleted by an operator: recreate it on the next beat, as a
            // restarted Python conductor would.
            self.id = None;
            return Err(DbError::Schema(format!(
                "magnum_service row {id} was deleted; recreating it on the next beat"
            )));
        }
        Ok(id)
    }
}
