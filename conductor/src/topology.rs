//! What the RPC server declares on the broker, computed from the options
//! exactly as oslo.messaging's rabbit driver does (`declare_topic_consumer`,
//! `declare_fanout_consumer`, `_get_queue_arguments`). Pure: no broker.
//!
//! | consumer | exchange (type, durable, auto_delete) | queue (durable, auto_delete) | binding |
//! |---|---|---|---|
//! | topic  | `E` (topic, D, A)           | `T` (D, A)                       | `T` |
//! | server | `E` (topic, D, A)           | `T.H` (D, A)                     | `T.H` |
//! | fanout | `T_fanout` (fanout, Q, true) | `T_fanout_<uuid>` (Q, false)    | `T` |
//!
//! D = durable queues or quorum; A = auto delete; Q = transient quorum or stream fanout.

use common::config::RabbitOpts;

/// A queue or consumer argument value (the only kinds oslo uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgValue {
    Str(String),
    Int(i64),
    Bool(bool),
}

/// Arguments in the order oslo builds them.
pub type Args = Vec<(&'static str, ArgValue)>;

/// Which of the three consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerKind {
    Topic,
    Server,
    Fanout,
}

/// One consumer: its exchange, queue, binding and arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerDecl {
    pub kind: ConsumerKind,
    pub exchange: String,
    pub exchange_type: &'static str,
    pub exchange_durable: bool,
    pub exchange_auto_delete: bool,
    pub queue: String,
    pub queue_durable: bool,
    pub queue_auto_delete: bool,
    pub binding_key: String,
    pub queue_args: Args,
    /// Arguments of `basic.consume` (`x-cancel-on-ha-failover`, `x-stream-offset`).
    pub consumer_args: Args,
}

/// oslo's `_get_queue_arguments`. `quorum` is the flag that applies to this
/// queue (topic queues: `rabbit_quorum_queue`; fanout: transient quorum).
pub fn queue_arguments(o: &RabbitOpts, ttl: i64, quorum: bool, stream: bool) -> Args {
    let mut args: Args = Vec::new();
    if o.rabbit_ha_queues {
        args.push(("x-ha-policy", ArgValue::Str("all".into())));
    }
    if quorum {
        args.push(("x-queue-type", ArgValue::Str("quorum".into())));
        if o.rabbit_quorum_delivery_limit > 0 {
            args.push((
                "x-delivery-limit",
                ArgValue::Int(o.rabbit_quorum_delivery_limit),
            ));
        }
        if o.rabbit_quorum_max_memory_length > 0 {
            args.push((
                "x-max-in-memory-length",
                ArgValue::Int(o.rabbit_quorum_max_memory_length),
            ));
        }
        if o.rabbit_quorum_max_memory_bytes > 0 {
            args.push((
                "x-max-in-memory-bytes",
                ArgValue::Int(o.rabbit_quorum_max_memory_bytes),
            ));
        }
    }
    if ttl > 0 {
        args.push(("x-expires", ArgValue::Int(ttl * 1000)));
    }
    if stream {
        args = vec![("x-queue-type", ArgValue::Str("stream".into()))];
        if ttl > 0 {
            args.push(("x-max-age", ArgValue::Str(format!("{ttl}s"))));
        }
    }
    args
}

/// The three consumers of an RPC server for topic `topic` and server `server`.
/// `fanout_unique` is the suffix of the fanout queue: a uuid4 hex, or the
/// queue manager's `<hostname>:<processname>:<n>`.
pub fn rpc_server_consumers(
    o: &RabbitOpts,
    exchange: &str,
    topic: &str,
    server: &str,
    fanout_unique: &str,
) -> Vec<ConsumerDecl> {
    let cancel_args: Args = if o.enable_cancel_on_failover {
        vec![("x-cancel-on-ha-failover", ArgValue::Bool(true))]
    } else {
        vec![]
    };
    let topic_consumer = |kind, queue: String| ConsumerDecl {
        kind,
        exchange: exchange.to_string(),
        exchange_type: "topic",
        exchange_durable: o.durable(),
        exchange_auto_delete: o.amqp_auto_delete,
        binding_key: queue.clone(),
        queue,
        queue_durable: o.durable(),
        queue_auto_delete: o.amqp_auto_delete,
        queue_args: queue_arguments(o, 0, o.rabbit_quorum_queue, false),
        consumer_args: cancel_args.clone(),
    };
    let fanout_durable = o.rabbit_transient_quorum_queue || o.rabbit_stream_fanout;
    let fanout_queue = if o.rabbit_stream_fanout {
        format!("{topic}_fanout")
    } else {
        format!("{topic}_fanout_{fanout_unique}")
    };
    let fanout = ConsumerDecl {
        kind: ConsumerKind::Fanout,
        exchange: format!("{topic}_fanout"),
        exchange_type: "fanout",
        exchange_durable: fanout_durable,
        exchange_auto_delete: true,
        queue: fanout_queue,
        queue_durable: fanout_durable,
        queue_auto_delete: false,
        binding_key: topic.to_string(),
        queue_args: queue_arguments(
            o,
            o.rabbit_transient_queues_ttl,
            o.rabbit_transient_quorum_queue,
            o.rabbit_stream_fanout,
        ),
        consumer_args: if o.rabbit_stream_fanout {
            vec![("x-stream-offset", ArgValue::Str("last".into()))]
        } else {
            cancel_args.clone()
        },
    };
    vec![
        topic_consumer(ConsumerKind::Topic, topic.to_string()),
        topic_consumer(ConsumerKind::Server, format!("{topic}.{server}")),
        fanout,
    ]
}

/// Whether the fanout queue is ours to delete on a clean shutdown (oslo
/// deletes it unless it is a shared stream or a queue-manager name).
pub fn delete_fanout_on_shutdown(o: &RabbitOpts) -> bool {
    !o.rabbit_stream_fanout && !o.use_queue_manager
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::config::{Config, Layered};
    use std::path::Path;

    fn opts(text: &str) -> RabbitOpts {
        let mut l = Layered::default();
        l.push_text(Path::new("t"), text).unwrap();
        Config::from_layered(&l).unwrap().rabbit
    }

    #[test]
    fn defaults_match_the_python_server() {
        let d = rpc_server_consumers(
            &opts(""),
            "magnum",
            "magnum-conductor",
            "abcdefghijkl",
            "f00d",
        );
        assert_eq!(d[0].queue, "magnum-conductor");
        assert_eq!(d[1].queue, "magnum-conductor.abcdefghijkl");
        assert_eq!(d[1].binding_key, "magnum-conductor.abcdefghijkl");
        assert!(!d[0].exchange_durable && !d[0].queue_durable && !d[0].queue_auto_delete);
        assert!(d[0].queue_args.is_empty());
        assert_eq!(d[2].exchange, "magnum-conductor_fanout");
        assert_eq!(d[2].queue, "magnum-conductor_fanout_f00d");
        assert!(d[2].exchange_auto_delete && !d[2].queue_durable);
        assert_eq!(
            d[2].queue_args,
            vec![("x-expires", ArgValue::Int(1_800_000))]
        );
    }

    #[test]
    fn quorum_stream_and_limits() {
        let o = opts(
            "[oslo_messaging_rabbit]\nrabbit_quorum_queue = true\nrabbit_transient_quorum_queue = true\n\
             rabbit_stream_fanout = true\nrabbit_qos_prefetch_count = 10\nrabbit_quorum_delivery_limit = 5\n\
             rabbit_quorum_max_memory_bytes = 1024\nenable_cancel_on_failover = true\n",
        );
        let d = rpc_server_consumers(&o, "magnum", "t", "s", "u");
        assert!(d[0].queue_durable && d[0].exchange_durable);
        assert_eq!(
            d[0].queue_args,
            vec![
                ("x-queue-type", ArgValue::Str("quorum".into())),
                ("x-delivery-limit", ArgValue::Int(5)),
                ("x-max-in-memory-bytes", ArgValue::Int(1024)),
            ]
        );
        assert_eq!(
            d[0].consumer_args,
            vec![("x-cancel-on-ha-failover", ArgValue::Bool(true))]
        );
        assert_eq!(d[2].queue, "t_fanout");
        assert!(d[2].queue_durable && d[2].exchange_durable);
        assert_eq!(
            d[2].queue_args,
            vec![
                ("x-queue-type", ArgValue::Str("stream".into())),
                ("x-max-age", ArgValue::Str("1800s".into()))
            ]
        );
        assert_eq!(
            d[2].consumer_args,
            vec![("x-stream-offset", ArgValue::Str("last".into()))]
        );
        assert!(!delete_fanout_on_shutdown(&o));
    }

    #[test]
    fn ha_and_durable_classic() {
        let o = opts(
            "[oslo_messaging_rabbit]\namqp_durable_queues = true\nrabbit_ha_queues = true\nrabbit_transient_queues_ttl = 0\n",
        );
        let d = rpc_server_consumers(&o, "magnum", "t", "s", "u");
        assert!(d[0].queue_durable);
        assert_eq!(
            d[0].queue_args,
            vec![("x-ha-policy", ArgValue::Str("all".into()))]
        );
        assert_eq!(
            d[2].queue_args,
            vec![("x-ha-policy", ArgValue::Str("all".into()))]
        );
        assert!(
            !d[2].queue_durable,
            "fanout durability follows transient quorum only"
        );
    }
}
