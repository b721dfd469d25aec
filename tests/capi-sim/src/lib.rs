//! `capi-sim`: what a management cluster's controllers do, simulated
//! against a **real** kube-apiserver, for tests, the demo and benchmarks.
//! The apiserver (admission, validation, server-side apply, watches,
//! finalizers, garbage collection) is never imitated: it is the one from
//! `scripts/k8s-up.sh` ([`controlplane`]). What only a simulation can give is
//! the CAPI 1.10/1.14, CAPO 0.12/0.14 and CAAPH 0.4/0.6 controllers'
//! behaviour, each cited to the upstream source in [`controllers`].
//!
//! - [`obj`], [`kinds`], [`cache`]: objects as JSON, the kinds by release
//!   line, the controllers' view (pure);
//! - [`controllers`]: the reconcilers (pure: cache in, writes out);
//! - [`runtime`]: watches into the cache, passes, writes (I/O);
//! - [`webhooks`] (pure) and [`admission`] (I/O): CAPI's admission
//!   webhooks, called by the apiserver;
//! - [`proxy`] + [`faults`]: a fault-injecting proxy in front of the
//!   apiserver (errors, delays, hangs, cut watches, request counts);
//! - [`controlplane`]: start, restart and stop real control planes;
//! - [`control`]: the simulator's own HTTP endpoint; [`clone`]: fleets for
//!   benchmarks;
//! - [`workload`]: real apiservers for workload clusters, from their CA
//!   Secrets (opt-in);
//! - [`cloud`]: CAPO's network and load balancer, OCCM's load balancers
//!   and Cinder CSI's volumes in the real OpenStack services (opt-in);
//! - [`resource_sets`]: what ClusterResourceSets apply in workload clusters;
//! - [`helm`]: CAAPH's Helm client, installing each HelmReleaseProxy's
//!   chart, rendered by the real Helm engine, in its workload cluster
//!   (opt-in); [`pod`]: what a container of a workload cluster reads (pure);
//! - [`shared`]: the lock and error-list helpers of the I/O modules.

pub mod admission;
pub mod cache;
pub mod clone;
pub mod cloud;
pub mod control;
pub mod controllers;
pub mod controlplane;
pub mod faults;
pub mod helm;
pub mod helm_storage;
pub mod kinds;
pub mod obj;
pub mod pod;
pub mod proxy;
pub mod resource_sets;
pub mod runtime;
pub mod shared;
pub mod tenant;
pub mod tls;
pub mod webhooks;
pub mod workload;

pub use kinds::Line;
pub use runtime::{Controllers, Options};
