//! `magnum-conductor adopt CLUSTER [--dry-run | --undo]`: take over a
//! running cluster that another driver created (issue 22, part 3).
//!
//! - [`plan`] (pure) decides, from what the management cluster holds and
//!   what this conductor would apply for the same rows once the cluster is
//!   adopted, which objects would be owned, created or kept and which
//!   machines would be replaced; and the marks that hand the objects over;
//! - [`read`] reads the rows and the objects;
//! - [`switch`] writes: the marks, a twin of the cluster's template with
//!   this conductor's driver, the cluster row (compare-and-set).
//!
//! A topology cluster (vexxhost magnum-cluster-api) is planned and marked
//! by [`topology`]: it stays a topology, written by this conductor.
//!
//! An adopted cluster keeps what its driver made until an operation must
//! change it (`capi::render::Adopted`, `lifecycle::plan::apply_adoption`):
//! a resize changes counts only; an upgrade replaces the machines with
//! this conductor's templates, as any upgrade does; its kubeadm
//! configuration, health checks, autoscaler and addons stay its driver's.

pub mod plan;
pub mod read;
pub mod switch;
pub mod topology;

use common::config::Config;
use common::db::Db;

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    DryRun,
    Adopt,
    Undo,
}

/// The exit status and the report of one `adopt` run: 0 adopted,
/// adoptable, undone or already ours; 1 refused; 2 could not be read or
/// written.
pub async fn run(cfg: &Config, ident: &str, mode: Mode) -> (u8, String) {
    let db = match Db::connect(&cfg.database).await {
        Ok(db) => db,
        Err(e) => return (2, format!("database: {e}\n")),
    };
    let out = async {
        let client = crate::mgmt::client(&cfg.capi)
            .await
            .map_err(|e| e.to_string())?;
        if mode == Mode::Undo {
            return switch::undo(cfg, &db, &client, ident).await.map(|s| (0, s));
        }
        let Some(reading) = read::read(cfg, &db, &client, ident).await? else {
            return Ok((
                0,
                format!("cluster {ident} is already this conductor's: nothing to adopt\n"),
            ));
        };
        let mut report = reading.plan.render();
        if !reading.plan.adoptable() {
            return Ok((1, report));
        }
        if mode == Mode::Adopt {
            report.push_str(&switch::adopt(&db, &client, &reading).await?);
        }
        Ok::<_, String>((0, report))
    }
    .await;
    db.pool.close().await;
    match out {
        Ok(r) => r,
        Err(e) => (2, format!("adopt {ident}: {e}\n")),
    }
}
