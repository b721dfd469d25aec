//! The Rust `magnum-conductor`.
//!
//! Layout:
//! - [`topology`]: what the RPC server declares, from the oslo options (pure);
//! - [`amqp`]: connecting and declaring; [`amqp::client`], the AMQP 0-9-1
//!   client on the runtime's own tasks, and [`amqp::frame`], its pure framing;
//! - [`server`]: the receive → decode → dispatch → reply → ack loop, with
//!   reconnects and graceful shutdown; [`reply`] sends replies;
//!   [`dedup`] remembers `_unique_id`s;
//! - [`handlers`]: the interface handlers implement, and the ones so far;
//!   [`ca`]: the certificate RPCs; [`indirection`]: Magnum's object
//!   indirection API (every object call of a console-script magnum-api);
//! - [`metrics`] and [`http`]: Prometheus metrics, health and readiness;
//! - [`cloud`]: what a workload cluster makes in OpenStack, and its
//!   clean-up when the cluster goes.

pub mod adopt;
pub mod amqp;
pub mod ca;
pub mod capi;
pub mod check;
pub mod cloud;
pub mod dedup;
pub mod failpoint;
pub mod forward;
pub mod handlers;
pub mod http;
pub mod indirection;
pub mod lifecycle;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod mgmt;
pub mod notify;
pub mod offline;
pub mod ownership;
pub mod reply;
pub mod server;
pub mod startup;
pub mod topology;
