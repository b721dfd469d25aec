//! `magnum-capi-proxy` (issue 31): the management cluster's way into
//! workload clusters without an API floating IP. TLS passed through,
//! routed by the server name of the client's hello, into the network
//! namespace of the cluster's tenant network on this host, to its API
//! there. The proxy never terminates TLS, so the client certificate and
//! the cluster's CA work end to end.
//!
//! - [`sni`] (pure): the server name from a ClientHello;
//! - [`route`] (pure): the routing table;
//! - [`plan`] (pure): what to serve, from the conductor's Services and
//!   CAPO's objects;
//! - [`publish`] (pure): the EndpointSlices and Lease of this host, stale
//!   slices of others;
//! - [`netns`] (I/O): dialing inside a namespace;
//! - [`serve`] (I/O): the listener and the byte pump;
//! - [`controller`] (I/O): watches, probes, routes, slices;
//! - [`metrics`]: Prometheus and `/healthz`.

pub mod controller;
pub mod metrics;
pub mod netns;
pub mod plan;
pub mod publish;
pub mod route;
pub mod serve;
pub mod sni;
