//! The broker leader election's lock (`conductor::lifecycle::coordination::elect`)
//! against a real RabbitMQ: one connection owns the exclusive queue, the
//! others are refused with RESOURCE_LOCKED (their connection, which the
//! RPC server consumes on, survives the refusal), the holder is shown in
//! the queue's arguments, and the queue goes away with its owner's
//! connection, whether it closes or is killed by the broker
//! (`rabbitmqctl close_connection`, as when missed heartbeats end it).

use std::time::Duration;

use conductor::amqp::client::{ConnectOptions, Connection};
use conductor::lifecycle::coordination::elect::{Attempt, LOCK_QUEUE, try_lock};
use integration_tests::{Vhost, rabbit_port, rabbitmqctl};

/// A connection of the conductor's own client, as the RPC server opens it.
async fn connect(vhost: &Vhost, name: &str) -> Connection {
    Connection::connect(&ConnectOptions {
        host: "127.0.0.1".into(),
        port: rabbit_port(),
        vhost: vhost.0.clone(),
        username: "guest".into(),
        password: "guest".into(),
        mechanism: amq_protocol::uri::SASLMechanism::AMQPlain,
        heartbeat: 60,
        frame_max: 131_072,
        timeout: Duration::from_secs(10),
        tls: None,
        name: name.into(),
    })
    .await
    .expect("the run's RabbitMQ (integration_tests::rabbit_port)")
}

fn won(a: &Attempt) -> bool {
    matches!(a, Attempt::Won(_))
}

fn lock_queue_line(vhost: &Vhost) -> Option<String> {
    rabbitmqctl(&[
        "list_queues",
        "-p",
        &vhost.0,
        "name",
        "exclusive",
        "arguments",
    ])
    .lines()
    .find(|l| l.starts_with(LOCK_QUEUE))
    .map(str::to_string)
}

#[tokio::test]
async fn one_connection_owns_the_lock_until_it_ends() {
    let vhost = Vhost::new("elect");
    let a = connect(&vhost, "conductor-a").await;
    let b = connect(&vhost, "conductor-b").await;
    let c = connect(&vhost, "conductor-c").await;

    let first = try_lock(&a, "host-a-1").await;
    assert!(won(&first), "{first:?}");
    for _ in 0..3 {
        let again = try_lock(&b, "host-b-1").await;
        assert!(matches!(again, Attempt::Held), "{again:?}");
    }
    assert!(
        b.is_connected(),
        "a refusal closes a channel, not the connection"
    );
    let line = lock_queue_line(&vhost).expect("the lock queue exists");
    assert!(line.contains("true"), "exclusive: {line}");
    assert!(
        line.contains("host-a-1"),
        "the holder is in the arguments: {line}"
    );
    // The owner's own declare again is fine (it is the owner).
    assert!(won(&try_lock(&a, "host-a-1").await));

    // A clean close: the queue goes with the connection.
    let _ = a.close(200, "stop").await;
    let mut took = None;
    for i in 0..50 {
        if won(&try_lock(&b, "host-b-1").await) {
            took = Some(i);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(took.is_some(), "b never won after a's connection closed");
    assert!(matches!(try_lock(&c, "host-c-1").await, Attempt::Held));
    assert!(lock_queue_line(&vhost).is_some_and(|l| l.contains("host-b-1")));

    // The broker ends b's connection (what missed heartbeats do): c wins.
    // (list_connections has no vhost filter: the vhost is a column.)
    let in_vhost = format!("\t{}\t", vhost.0);
    let conns = rabbitmqctl(&["list_connections", "pid", "vhost", "client_properties"]);
    let pid = conns
        .lines()
        .find(|l| l.contains(&in_vhost) && l.contains("conductor-b"))
        .and_then(|l| l.split_whitespace().next())
        .expect("b's connection is listed")
        .to_string();
    rabbitmqctl(&["close_connection", &pid, "test: a conductor cut off"]);
    let mut c_won = false;
    for _ in 0..50 {
        if won(&try_lock(&c, "host-c-1").await) {
            c_won = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(c_won, "c never won after the broker closed b's connection");
    let _ = c.close(200, "done").await;
}
