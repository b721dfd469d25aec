//! Choosing the status leader on the broker (`[capi] leader_election =
//! amqp`, the default): nothing asked of the management cluster at rest.
//!
//! The conductors already share one RabbitMQ. The leader is the conductor
//! whose AMQP connection owns the **exclusive queue**
//! `magnum-conductor-leader` (no consumer, no message: a lock). RabbitMQ
//! lets one connection own an exclusive queue; anyone else's declare of it
//! is refused with `405 RESOURCE_LOCKED`, and the broker deletes the queue
//! as soon as its owner's connection ends: a clean stop, a kill (the socket
//! closes), or missed heartbeats (a host cut off). The others try again
//! every third of `lease_duration` (one declare on a fresh channel: broker
//! traffic, not apiserver traffic). The name cannot meet one of oslo's
//! queues (`<topic>`, `<topic>.<host>`, `<topic>_fanout_<id>`).
//!
//! The Lease leader lost its Lease when it lost the management cluster;
//! the broker's lock does not know about the management cluster, so the
//! leader judges itself ([`Fitness`]): while its watches report no error it
//! asks nothing (they are the proof); after a watch error it probes the
//! apiserver (a one-item list of Leases) each round, and one that has
//! failed for `lease_duration` deletes the queue (steps down) and stays out
//! of the campaign until a probe succeeds. A conductor that cannot reach the
//! management cluster never campaigns.
//!
//! Two leaders at once are possible for a moment (the old one's connection
//! is not yet known dead on one side): what it guards is the single status
//! writer, whose writes are idempotent views of the same CAPI objects; the
//! clusters' operations stay exclusive through their own Leases
//! ([`super::lease`]), whatever the election.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::amqp::client::{
    Channel, Connection, Error as AmqpError, QueueDeclareOptions, QueueDeleteOptions,
};
use tokio::sync::watch;

use super::lease::Leases;
use crate::metrics::Metrics;

/// The lock queue's name.
pub const LOCK_QUEUE: &str = "magnum-conductor-leader";

/// How long after a watch error the leader keeps probing the apiserver.
/// Longer than the watches' longest retry pause (kube-runtime's default
/// backoff caps at 30 s), so a management cluster that stays down keeps a
/// probe due.
pub const WATCH_ERROR_WINDOW: Duration = Duration::from_secs(60);

/// The RPC server's current broker connection (`None` while it has none).
pub type ConnectionWatch = watch::Receiver<Option<Arc<Connection>>>;

/// Whether this conductor can serve as leader, judged from its watches and
/// probes of the apiserver (pure: time comes in as arguments).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fitness {
    /// Since when every probe failed (`None`: the last one succeeded, or
    /// none was needed).
    failing_since: Option<Instant>,
}

impl Fitness {
    /// A probe is due while failing, and for [`WATCH_ERROR_WINDOW`] after a
    /// watch error. Healthy watches at rest: never (no request).
    pub fn probe_due(&self, last_watch_error: Option<Instant>, now: Instant) -> bool {
        self.failing_since.is_some()
            || last_watch_error
                .is_some_and(|t| now.saturating_duration_since(t) < WATCH_ERROR_WINDOW)
    }

    /// A probe's outcome.
    pub fn record(&mut self, ok: bool, now: Instant) {
        if ok {
            self.failing_since = None;
        } else if self.failing_since.is_none() {
            self.failing_since = Some(now);
        }
    }

    /// A candidate campaigns only with no failure outstanding.
    pub fn may_campaign(&self) -> bool {
        self.failing_since.is_none()
    }

    /// The leader hands over once the apiserver failed it for `patience`.
    pub fn must_step_down(&self, now: Instant, patience: Duration) -> bool {
        self.failing_since
            .is_some_and(|s| now.saturating_duration_since(s) >= patience)
    }
}

/// One declare of the lock queue.
#[derive(Debug)]
pub enum Attempt {
    /// Ours now (the channel stays open to delete it at step-down).
    Won(Channel),
    /// Another connection owns it.
    Held,
    /// The broker did not answer as expected.
    Failed(AmqpError),
}

/// Whether the broker refused a declare because another connection owns
/// the exclusive queue (405 RESOURCE_LOCKED).
pub fn is_locked(e: &AmqpError) -> bool {
    matches!(e, AmqpError::ChannelClosed { code: 405, .. })
}

/// Declare the lock queue on a fresh channel of `conn` (a refusal closes
/// that channel, never the connection the RPC server consumes on).
pub async fn try_lock(conn: &Connection, identity: &str) -> Attempt {
    let ch = match conn.create_channel().await {
        Ok(c) => c,
        Err(e) => return Attempt::Failed(e),
    };
    // Who holds it, for `rabbitmqctl list_queues name arguments` (an
    // unknown `x-` argument: stored and shown, never interpreted).
    let args = crate::amqp::field_table(&vec![(
        "x-magnum-conductor-holder",
        crate::topology::ArgValue::Str(identity.to_string()),
    )]);
    let opts = QueueDeclareOptions {
        exclusive: true,
        durable: false,
        auto_delete: false,
        passive: false,
    };
    match ch.queue_declare(LOCK_QUEUE, opts, args).await {
        Ok(_) => Attempt::Won(ch),
        Err(e) if is_locked(&e) => Attempt::Held,
        Err(e) => {
            let _ = ch.close(200, "election").await;
            Attempt::Failed(e)
        }
    }
}

/// The lock while held: the connection owning it and a channel to delete it.
struct Lock {
    conn: Arc<Connection>,
    channel: Channel,
}

impl Lock {
    /// Still ours: the owning connection is the RPC server's current one
    /// and up (the broker drops the queue with the connection).
    fn holds(&self, current: Option<&Arc<Connection>>) -> bool {
        current.is_some_and(|c| Arc::ptr_eq(c, &self.conn)) && self.conn.is_connected()
    }

    /// Hand over: delete the queue (the next candidate wins at its next
    /// round). On failure the lock comes back, to be released at the next
    /// round (left alone, nobody could lead while this connection lives).
    async fn release(self) -> Option<Lock> {
        let channel = if self.channel.is_connected() {
            Ok(self.channel.clone())
        } else {
            self.conn.create_channel().await
        };
        let deleted = match channel {
            Ok(ch) => {
                let r = ch
                    .queue_delete(LOCK_QUEUE, QueueDeleteOptions::default())
                    .await;
                let _ = ch.close(200, "stepped down").await;
                r.map(|_| ())
            }
            Err(e) => Err(e),
        };
        match deleted {
            Ok(()) => None,
            Err(e) => {
                tracing::warn!(error = %e, "cannot delete the leader queue; retrying at the next round");
                Some(self)
            }
        }
    }
}

/// Campaign on the broker for ever; `elected` runs each time this process
/// becomes the leader. The leader flag lives in `leases` (which also
/// probes the apiserver). `last_watch_error` tells when this conductor's
/// watches last failed (the engine's watches: passed in, so coordination
/// does not depend on them).
pub async fn campaign<F, W>(
    mut conns: ConnectionWatch,
    leases: Leases,
    last_watch_error: W,
    metrics: Metrics,
    elected: F,
) where
    F: Fn() + Send + 'static,
    W: Fn() -> Option<Instant> + Send + 'static,
{
    let every = (leases.duration() / 3).max(Duration::from_secs(1));
    let patience = leases.duration();
    let mut fitness = Fitness::default();
    let mut held: Option<Lock> = None;
    // Stepped down, the queue not deleted yet.
    let mut releasing: Option<Lock> = None;
    loop {
        if let Some(lock) = releasing.take()
            && lock.holds(conns.borrow().as_ref())
        {
            releasing = lock.release().await;
        }
        let now = Instant::now();
        if fitness.probe_due(last_watch_error(), now) {
            let ok = match leases.probe().await {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!(error = %e, "the management cluster does not answer");
                    false
                }
            };
            let was_fit = fitness.may_campaign();
            fitness.record(ok, Instant::now());
            if ok && !was_fit {
                tracing::info!("the management cluster answers again");
            }
        }
        let current = conns.borrow().clone();
        match held.take() {
            Some(lock) if leases.stopping() => {
                // SIGTERM: the RPC server waits for this to let go of its
                // connection before closing it, so the queue is deleted
                // and the channel closed here, not torn down mid-close.
                leases.set_leader(false);
                if lock.release().await.is_none() {
                    tracing::info!("handed over the status leadership: this conductor is stopping");
                }
                return;
            }
            None if leases.stopping() => return,
            Some(lock) if !lock.holds(current.as_ref()) => {
                tracing::error!(
                    "lost the status leadership: the broker connection owning {LOCK_QUEUE} ended"
                );
                metrics
                    .leader_stepdowns
                    .with_label_values(&["broker"])
                    .inc();
                leases.set_leader(false);
            }
            Some(lock) if fitness.must_step_down(Instant::now(), patience) => {
                tracing::error!(
                    "stepping down as status leader: the management cluster has not answered for {}s",
                    patience.as_secs()
                );
                metrics
                    .leader_stepdowns
                    .with_label_values(&["apiserver"])
                    .inc();
                leases.set_leader(false);
                releasing = lock.release().await;
            }
            Some(lock) => held = Some(lock),
            None => {
                if let Some(conn) = current.filter(|c| c.is_connected())
                    && fitness.may_campaign()
                    && releasing.is_none()
                {
                    match try_lock(&conn, leases.me()).await {
                        Attempt::Won(channel) => {
                            tracing::info!(me = %leases.me(), queue = LOCK_QUEUE, "elected status leader");
                            held = Some(Lock { conn, channel });
                            leases.set_leader(true);
                            elected();
                        }
                        Attempt::Held => tracing::debug!("another conductor leads"),
                        Attempt::Failed(e) => {
                            tracing::warn!(error = %e, "cannot campaign for the leadership")
                        }
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            changed = conns.changed() => {
                if changed.is_err() {
                    // The RPC server is gone (shutdown): so is the lock.
                    leases.set_leader(false);
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENCE: Duration = Duration::from_secs(15);

    #[test]
    fn healthy_watches_cost_no_probe() {
        let f = Fitness::default();
        let now = Instant::now();
        assert!(!f.probe_due(None, now));
        assert!(f.may_campaign());
        assert!(!f.must_step_down(now, PATIENCE));
    }

    #[test]
    fn a_watch_error_makes_probes_due_for_a_window() {
        let f = Fitness::default();
        let t0 = Instant::now();
        assert!(f.probe_due(Some(t0), t0 + Duration::from_secs(1)));
        assert!(f.probe_due(Some(t0), t0 + WATCH_ERROR_WINDOW - Duration::from_millis(1)));
        assert!(
            !f.probe_due(Some(t0), t0 + WATCH_ERROR_WINDOW),
            "an old error alone is no reason to ask"
        );
    }

    #[test]
    fn failing_probes_stop_campaigns_at_once_and_step_down_after_patience() {
        let mut f = Fitness::default();
        let t0 = Instant::now();
        f.record(false, t0);
        assert!(
            !f.may_campaign(),
            "a candidate that cannot reach the apiserver waits"
        );
        assert!(!f.must_step_down(t0 + PATIENCE - Duration::from_millis(1), PATIENCE));
        // A second failure does not restart the clock.
        f.record(false, t0 + Duration::from_secs(10));
        assert!(f.must_step_down(t0 + PATIENCE, PATIENCE));
        assert!(
            f.probe_due(None, t0 + Duration::from_secs(3600)),
            "while failing, probes go on whatever the watches say"
        );
        f.record(true, t0 + Duration::from_secs(20));
        assert!(f.may_campaign());
        assert!(!f.must_step_down(t0 + Duration::from_secs(40), PATIENCE));
        assert!(!f.probe_due(None, t0 + Duration::from_secs(40)));
    }

    #[test]
    fn only_resource_locked_means_held() {
        let locked = AmqpError::ChannelClosed {
            code: 405,
            text: "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue".into(),
        };
        assert!(is_locked(&locked));
        let refused = AmqpError::ChannelClosed {
            code: 403,
            text: "ACCESS_REFUSED".into(),
        };
        assert!(
            !is_locked(&refused),
            "no rights is an error to report, not a leader"
        );
        assert!(!is_locked(&AmqpError::ConnectionClosed {
            code: 405,
            text: "a connection-level code is not the queue's lock".into(),
        }));
        assert!(!is_locked(&AmqpError::Closed("gone".into())));
    }
}
