//! Cluster operations on Cluster API.
//!
//! - [`rows`]: the rows `cluster_create` inserts and the rendering input read
//!   back from them (pure);
//! - [`sync`]: which columns a status view changes (pure);
//! - [`watch`]: reflectors on the CAPI kinds, one event = one cluster to look at;
//! - [`credentials`]: the OpenStack credentials given to each cluster;
//! - [`keystone`]: application credentials in Keystone (HTTP);
//! - [`engine`]: create, delete, the status worker and the startup resume (I/O).

pub mod credentials;
pub mod engine;
pub mod keystone;
pub mod rows;
pub mod sync;
pub mod watch;

pub use engine::Engine;
