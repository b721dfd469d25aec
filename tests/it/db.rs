//! The data layer against the real MariaDB: deadlock retries on a real
//! error 1213, and the schema revision check on a database we build.

use std::sync::Arc;
use std::time::Duration;

use common::db::schema::{self, REV_23};
use common::db::{Db, DbError, DbUrl, RetryPolicy};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, Executor};
use tokio::sync::Barrier;

fn server() -> String {
    std::env::var("MAGNUM_RS_DB_SERVER")
        .unwrap_or_else(|_| "mysql+pymysql://root@127.0.0.1:3306".into())
}

async fn pool_for(database: &str, size: u32) -> Result<MySqlPool, sqlx::Error> {
    let url =
        DbUrl::parse(&format!("{}/{database}", server())).expect("MAGNUM_RS_DB_SERVER is a URL");
    MySqlPoolOptions::new()
        .max_connections(size)
        .connect_with(url.connect_options())
        .await
}

/// A fresh database with Magnum 23's schema (drop it with [`drop_db`]).
async fn fresh_db() -> (MySqlPool, String) {
    let name = format!("mc_it_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let admin = pool_for("", 1)
        .await
        .expect("MariaDB reachable (run scripts/setup-env.sh)");
    admin
        .execute(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
        .await
        .unwrap();
    let pool = pool_for(&name, 4).await.unwrap();
    schema::create_fresh(&pool, REV_23).await.unwrap();
    (pool, name)
}

/// A fresh database behind a `Db` that retries once, at once (the repo
/// tests: no outage to ride out).
async fn fresh_repo_db() -> (Db, String) {
    let (pool, name) = fresh_db().await;
    let db = Db::from_pool(
        pool,
        RetryPolicy {
            max_retries: 1,
            interval: Duration::ZERO,
            increase: false,
            max_interval: Duration::ZERO,
        },
    )
    .await
    .unwrap();
    (db, name)
}

async fn drop_db(name: &str) {
    if let Ok(admin) = pool_for("", 1).await {
        let _ = admin
            .execute(AssertSqlSafe(format!("DROP DATABASE IF EXISTS `{name}`")))
            .await;
    }
}

/// Lock row `first`, wait for the other side, then lock row `second`.
/// A `heavy` transaction first writes rows of its own, so InnoDB picks the
/// other one as the deadlock victim (it rolls back the smaller one).
async fn cross_lock(
    pool: &MySqlPool,
    first: i64,
    second: i64,
    barrier: &Barrier,
    heavy: bool,
) -> Result<(), DbError> {
    let mut tx = pool.begin().await?;
    if heavy {
        for i in 0..20 {
            sqlx::query(
                "INSERT INTO quotas (project_id, resource, hard_limit) VALUES (?, 'Cluster', 0)",
            )
            .bind(format!("heavy-{first}-{i}"))
            .execute(&mut *tx)
            .await?;
        }
    }
    sqlx::query("SELECT id FROM quotas WHERE id = ? FOR UPDATE")
        .bind(first)
        .fetch_one(&mut *tx)
        .await?;
    barrier.wait().await;
    sqlx::query("UPDATE quotas SET hard_limit = hard_limit + 1 WHERE id = ?")
        .bind(second)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

#[tokio::test]
async fn deadlocks_are_retried() {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let (pool, name) = fresh_db().await;
    pool.execute("INSERT INTO quotas (project_id, resource, hard_limit) VALUES ('a', 'Cluster', 1), ('b', 'Cluster', 1)")
        .await
        .unwrap();
    let db = Db::from_pool(
        pool.clone(),
        RetryPolicy {
            max_retries: 3,
            interval: Duration::from_millis(50),
            increase: true,
            max_interval: Duration::from_millis(200),
        },
    )
    .await
    .unwrap();
    assert_eq!(db.schema.revision, REV_23);

    // Two transactions lock rows 1 and 2 in opposite orders: InnoDB kills one
    // with 1213. The side under retry_on_deadlock must still complete.
    let barrier = Arc::new(Barrier::new(2));
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let retried = {
        let (db, barrier, attempts) = (db.clone(), barrier.clone(), attempts.clone());
        tokio::spawn(async move {
            db.retry_on_deadlock("test", || {
                let (pool, barrier, attempts) =
                    (db.pool.clone(), barrier.clone(), attempts.clone());
                async move {
                    let n = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if n == 0 {
                        cross_lock(&pool, 1, 2, &barrier, false).await
                    } else {
                        // Later attempts run alone.
                        cross_lock(&pool, 1, 2, &Barrier::new(1), false).await
                    }
                }
            })
            .await
        })
    };
    let other = {
        let (pool, barrier) = (pool.clone(), barrier.clone());
        tokio::spawn(async move { cross_lock(&pool, 2, 1, &barrier, true).await })
    };
    let (r1, r2) = (retried.await.unwrap(), other.await.unwrap());
    assert!(r2.is_ok(), "the heavy side is never the victim: {r2:?}");
    assert!(r1.is_ok(), "the retried side must complete: {r1:?}");
    let n = attempts.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        n, 2,
        "the first attempt must have died of 1213 and been retried once"
    );
    let limits: Vec<(i64,)> =
        sqlx::query_as("SELECT hard_limit FROM quotas WHERE id IN (1, 2) ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        limits,
        vec![(2,), (2,)],
        "both transactions' updates landed exactly once"
    );
    drop_db(&name).await;
}

#[tokio::test]
async fn unknown_revision_is_refused_by_name() {
    let (pool, name) = fresh_db().await;
    pool.execute("UPDATE alembic_version SET version_num = '7da8489d6a68'")
        .await
        .unwrap();
    let err = Db::from_pool(
        pool,
        RetryPolicy {
            max_retries: 0,
            interval: Duration::ZERO,
            increase: false,
            max_interval: Duration::ZERO,
        },
    )
    .await
    .err()
    .expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("7da8489d6a68") && msg.contains(REV_23),
        "{msg}"
    );
    drop_db(&name).await;
}

#[tokio::test]
async fn create_fresh_refuses_a_used_database() {
    let (pool, name) = fresh_db().await;
    let err = schema::create_fresh(&pool, REV_23)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("refusing"), "{err}");
    drop_db(&name).await;
}

#[tokio::test]
async fn heartbeats_of_one_host_share_a_row() {
    let (pool, name) = fresh_db().await;
    let db = Db::from_pool(
        pool.clone(),
        RetryPolicy {
            max_retries: 3,
            interval: Duration::from_millis(10),
            increase: true,
            max_interval: Duration::from_millis(50),
        },
    )
    .await
    .unwrap();
    use common::db::service::Heartbeat;
    let (mut a, mut b) = (
        Heartbeat::new(Some("ctl-1".into())),
        Heartbeat::new(Some("ctl-1".into())),
    );
    let (ra, rb) = tokio::join!(a.beat(&db), b.beat(&db));
    assert_eq!(
        ra.unwrap(),
        rb.unwrap(),
        "two processes of one host share one row"
    );
    let mut none = Heartbeat::new(None);
    let id_none = none.beat(&db).await.unwrap();
    none.beat(&db).await.unwrap();
    let rows: Vec<(Option<String>, i32, bool)> = sqlx::query_as(
        "SELECT host, report_count, last_seen_up IS NOT NULL AND updated_at IS NOT NULL AND created_at IS NOT NULL \
         FROM magnum_service ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![(Some("ctl-1".into()), 2, true), (None, 2, true)],
        "row ids: none={id_none}"
    );
    drop_db(&name).await;
}

#[tokio::test]
async fn names_conflicts_and_deletes() {
    use common::db::model::CLUSTER;
    use common::db::repo::{self, Scope};
    use rpc_schema::ovo::{CLUSTER as CLUSTER_CLASS, MagnumObject};
    use serde_json::json;
    let (db, name) = fresh_repo_db().await;
    let mut uuids = Vec::new();
    for _ in 0..2 {
        let mut c = MagnumObject::new(&CLUSTER_CLASS);
        let u = uuid::Uuid::new_v4().to_string();
        c.set("uuid", json!(u)).unwrap();
        c.set("name", json!("twin")).unwrap();
        c.set("project_id", json!("p")).unwrap();
        let stored = repo::create(&db, &CLUSTER, &c).await.unwrap();
        assert_eq!(
            stored.get_bool("floating_ip_enabled"),
            Some(true),
            "model default applied"
        );
        uuids.push(u);
    }
    let class_of = |e: DbError| match e {
        DbError::Magnum { class, .. } => class,
        other => panic!("not a Magnum exception: {other}"),
    };
    let admin = Scope::admin();
    assert_eq!(
        class_of(
            repo::get_by_name(&db, &CLUSTER, &admin, "twin")
                .await
                .unwrap_err()
        ),
        "Conflict"
    );
    assert_eq!(
        class_of(
            repo::get_by_name(&db, &CLUSTER, &admin, "none")
                .await
                .unwrap_err()
        ),
        "ClusterNotFound"
    );
    let other_project = Scope {
        is_admin: false,
        all_tenants: false,
        project_id: Some("q".into()),
        user_id: None,
    };
    assert_eq!(
        class_of(
            repo::get(&db, &CLUSTER, &other_project, &uuids[0])
                .await
                .unwrap_err()
        ),
        "ClusterNotFound"
    );
    repo::destroy(&db, &CLUSTER, &uuids[0]).await.unwrap();
    assert_eq!(
        repo::get_by_name(&db, &CLUSTER, &admin, "twin")
            .await
            .unwrap()
            .get_str("uuid"),
        Some(uuids[1].as_str())
    );
    assert_eq!(
        class_of(repo::destroy(&db, &CLUSTER, &uuids[0]).await.unwrap_err()),
        "ClusterNotFound"
    );
    // Re-creating an existing uuid is ClusterAlreadyExists.
    let mut dup = MagnumObject::new(&CLUSTER_CLASS);
    dup.set("uuid", json!(uuids[1])).unwrap();
    assert_eq!(
        class_of(repo::create(&db, &CLUSTER, &dup).await.unwrap_err()),
        "ClusterAlreadyExists"
    );
    drop_db(&name).await;
}

/// The status worker's conditional writes: a row saved only if it still
/// holds what was read (every column but updated_at, checked under the row
/// lock), so a write decided from a read never overwrites what an
/// operation wrote since; a JSON column read back compares equal.
#[tokio::test]
async fn writes_only_if_unchanged_since_read() {
    use common::db::model::CLUSTER;
    use common::db::repo::{self, Scope};
    use rpc_schema::ovo::{CLUSTER as CLUSTER_CLASS, MagnumObject};
    use serde_json::json;
    let (db, name) = fresh_repo_db().await;
    let mut c = MagnumObject::new(&CLUSTER_CLASS);
    let u = uuid::Uuid::new_v4().to_string();
    c.set("uuid", json!(u)).unwrap();
    c.set("project_id", json!("p")).unwrap();
    c.set("status", json!("CREATE_IN_PROGRESS")).unwrap();
    c.set("labels", json!({"kube_tag": "v1.30.4", "a": "b"}))
        .unwrap();
    repo::create(&db, &CLUSTER, &c).await.unwrap();
    let write = |status: &str| {
        let mut o = MagnumObject::new(&CLUSTER_CLASS);
        o.set("status", json!(status)).unwrap();
        o
    };
    let read = repo::get(&db, &CLUSTER, &Scope::admin(), &u).await.unwrap();
    // Unchanged since read (JSON columns included): written.
    let (saved, changed) =
        repo::save_changed_if(&db, &CLUSTER, &u, &write("CREATE_COMPLETE"), Some(&read))
            .await
            .unwrap()
            .expect("unchanged since read");
    assert_eq!(changed, ["status"]);
    assert_eq!(saved.get_str("status"), Some("CREATE_COMPLETE"));
    // Another writer changed the row since `read` (here: the write above,
    // as an operation's DELETE_IN_PROGRESS would): nothing written.
    repo::save(&db, &CLUSTER, &u, &write("DELETE_IN_PROGRESS"))
        .await
        .unwrap();
    assert_eq!(
        repo::save_changed_if(&db, &CLUSTER, &u, &write("CREATE_COMPLETE"), Some(&read))
            .await
            .unwrap(),
        None
    );
    let now = repo::get(&db, &CLUSTER, &Scope::admin(), &u).await.unwrap();
    assert_eq!(
        now.get_str("status"),
        Some("DELETE_IN_PROGRESS"),
        "not overwritten"
    );
    // A fresh read: written again.
    assert!(
        repo::save_changed_if(&db, &CLUSTER, &u, &write("DELETE_FAILED"), Some(&now))
            .await
            .unwrap()
            .is_some()
    );
    drop_db(&name).await;
}
