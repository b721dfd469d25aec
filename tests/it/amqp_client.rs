//! The conductor's AMQP client (`conductor::amqp::client`) against the real
//! RabbitMQ: messages larger than a frame, in order; acknowledgements and
//! rejections as the broker counts them; publisher confirms with a
//! `mandatory` message returned to the right publisher; a channel the
//! broker closes leaves the connection up; a connection the broker closes
//! ends every consumer with the reason. And against a broker that goes
//! silent after the handshake: missed heartbeats end the connection.

use std::time::Duration;

use amq_protocol::protocol::{AMQPClass, BasicProperties, connection};
use amq_protocol::types::FieldTable;
use amq_protocol::uri::SASLMechanism;
use conductor::amqp::client::{
    BasicConsumeOptions, BasicPublishOptions, Confirmation, ConnectOptions, Connection, Error,
    QueueDeclareOptions,
};
use conductor::amqp::frame;
use futures_util::StreamExt;
use integration_tests::{Vhost, rabbit_port, rabbitmqctl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn options(vhost: &str, name: &str) -> ConnectOptions {
    ConnectOptions {
        host: "127.0.0.1".into(),
        port: rabbit_port(),
        vhost: vhost.into(),
        username: "guest".into(),
        password: "guest".into(),
        mechanism: SASLMechanism::AMQPlain,
        heartbeat: 60,
        frame_max: 131_072,
        timeout: Duration::from_secs(10),
        tls: None,
        name: name.into(),
    }
}

async fn connect(vhost: &Vhost, name: &str) -> Connection {
    Connection::connect(&options(&vhost.0, name))
        .await
        .expect("the run's RabbitMQ (integration_tests::rabbit_port)")
}

fn queue_line(vhost: &Vhost, queue: &str) -> Option<String> {
    rabbitmqctl(&[
        "list_queues",
        "-p",
        &vhost.0,
        "name",
        "messages_ready",
        "messages_unacknowledged",
    ])
    .lines()
    .find(|l| l.split_whitespace().next() == Some(queue))
    .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
}

#[tokio::test]
async fn messages_round_trip_and_are_settled_as_the_broker_counts_them() {
    let vhost = Vhost::new("client");
    let conn = connect(&vhost, "client-test").await;
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let publisher = conn.create_channel().await.unwrap();
    publisher.confirm_select().await.unwrap();
    // Bodies of 0 bytes, one frame, and three frames (frame_max 131,072).
    let bodies: Vec<Vec<u8>> = [0usize, 10, 300_000, 7]
        .iter()
        .enumerate()
        .map(|(i, n)| (0..*n).map(|j| ((i * 31 + j) % 251) as u8).collect())
        .collect();
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_delivery_mode(2);
    let mut confirms = Vec::new();
    for b in &bodies {
        confirms.push(
            publisher
                .basic_publish(
                    "",
                    "q",
                    BasicPublishOptions { mandatory: true },
                    b,
                    props.clone(),
                )
                .unwrap(),
        );
    }
    for c in confirms {
        assert!(matches!(c.await.unwrap(), Confirmation::Ack(None)));
    }
    let mut consumer = ch
        .basic_consume(
            "q",
            "t1",
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..bodies.len() {
        let d = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("a delivery")
            .expect("the stream goes on")
            .unwrap();
        assert_eq!(d.properties, props);
        assert_eq!(d.routing_key.as_str(), "q");
        assert!(!d.redelivered);
        got.push(d);
    }
    assert_eq!(
        got.iter().map(|d| d.data.clone()).collect::<Vec<_>>(),
        bodies,
        "every body whole and in order"
    );
    // Ack the first two, reject the third for good, requeue the fourth:
    // it comes back, redelivered.
    ch.basic_ack(got[0].delivery_tag).unwrap();
    ch.basic_ack(got[1].delivery_tag).unwrap();
    ch.basic_reject(got[2].delivery_tag, false).unwrap();
    ch.basic_reject(got[3].delivery_tag, true).unwrap();
    let again = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await
        .expect("the requeued message")
        .unwrap()
        .unwrap();
    assert!(again.redelivered);
    assert_eq!(again.data, bodies[3]);
    ch.basic_ack(again.delivery_tag).unwrap();
    // The broker's count: nothing ready, nothing unacknowledged. A
    // synchronous method after the acknowledgements is the barrier: the
    // broker handles a channel's frames in order.
    ch.basic_cancel("t1").await.unwrap();
    assert_eq!(queue_line(&vhost, "q").as_deref(), Some("0 0"));
    assert!(
        consumer.next().await.is_none(),
        "a cancelled consumer's stream ends"
    );
    conn.close(200, "done").await.unwrap();
    assert!(!conn.is_connected());
}

#[tokio::test]
async fn a_returned_message_is_the_one_its_publisher_waits_for() {
    let vhost = Vhost::new("client");
    let conn = connect(&vhost, "client-test").await;
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        "here",
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.confirm_select().await.unwrap();
    let opts = BasicPublishOptions { mandatory: true };
    // Interleaved, all in flight at once: only the ones to the missing
    // queue come back, each to its own publisher.
    let keys = ["here", "gone", "here", "gone", "here"];
    let confirms: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            ch.basic_publish(
                "",
                k,
                opts,
                format!("m{i}").as_bytes(),
                BasicProperties::default(),
            )
            .unwrap()
        })
        .collect();
    let mut seen = Vec::new();
    for c in confirms {
        seen.push(match c.await.unwrap() {
            Confirmation::Ack(None) => "ack".to_string(),
            Confirmation::Ack(Some(r)) => {
                assert_eq!(r.reply_code, 312, "NO_ROUTE");
                format!(
                    "returned {} {}",
                    r.routing_key,
                    String::from_utf8_lossy(&r.data)
                )
            }
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        seen,
        ["ack", "returned gone m1", "ack", "returned gone m3", "ack"]
    );
    conn.close(200, "done").await.unwrap();
}

#[tokio::test]
async fn a_channel_the_broker_closes_leaves_the_connection_and_a_closed_connection_ends_consumers()
{
    let vhost = Vhost::new("client");
    let conn = connect(&vhost, "client-closing").await;
    let ch = conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let err = ch
        .queue_declare("missing", passive, FieldTable::default())
        .await
        .unwrap_err();
    assert_eq!(err.reply_code(), Some(404), "{err}");
    assert!(err.to_string().contains("NOT_FOUND"), "{err}");
    assert!(!ch.is_connected(), "the broker closed that channel");
    assert!(
        ch.basic_ack(1).is_err(),
        "nothing is sent on a closed channel"
    );
    assert!(conn.is_connected(), "the connection is still up");
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare("q", QueueDeclareOptions::default(), FieldTable::default())
        .await
        .unwrap();
    let mut consumer = ch
        .basic_consume(
            "q",
            "t",
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    // The broker ends the connection (what an operator or a failover does).
    // (list_connections has no vhost filter: the vhost is a column.)
    let in_vhost = format!("\t{}\t", vhost.0);
    let pid = rabbitmqctl(&["list_connections", "pid", "vhost", "client_properties"])
        .lines()
        .find(|l| l.contains(&in_vhost) && l.contains("client-closing"))
        .and_then(|l| l.split_whitespace().next())
        .expect("the connection is listed under its name")
        .to_string();
    rabbitmqctl(&["close_connection", &pid, "test: closed by the operator"]);
    let end = tokio::time::timeout(Duration::from_secs(10), consumer.next())
        .await
        .expect("the consumer hears of it");
    match end {
        Some(Err(Error::ConnectionClosed { code, text })) => {
            assert_eq!(code, 320, "CONNECTION_FORCED");
            assert!(text.contains("closed by the operator"), "{text}");
        }
        other => panic!("expected the broker's close, got {other:?}"),
    }
    assert!(consumer.next().await.is_none(), "then the stream ends");
    assert!(!conn.is_connected());
    assert!(conn.create_channel().await.is_err());
}

#[tokio::test]
async fn a_refused_login_says_so() {
    let vhost = Vhost::new("client");
    let mut o = options(&vhost.0, "client-refused");
    o.password = "not-the-password".into();
    let err = match Connection::connect(&o).await {
        Ok(_) => panic!("a wrong password was accepted"),
        Err(e) => e,
    };
    assert_eq!(err.reply_code(), Some(403), "{err}");
    assert!(!format!("{err} {err:?}").contains("not-the-password"));
}

/// Read from a fake broker's client until one whole frame is in `buf`.
async fn read_frame(s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) {
    loop {
        if let Ok(Some((_, n))) = frame::parse(buf, 0) {
            buf.drain(..n);
            return;
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the client hung up during the handshake");
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test]
async fn a_broker_that_goes_silent_is_given_up_after_two_heartbeats() {
    // A broker that completes the handshake with a 1 s heartbeat, then
    // never sends another byte (a host that froze, a network that dropped
    // everything): the client must not wait for TCP to notice.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let broker = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut header = [0u8; 8];
        s.read_exact(&mut header).await.unwrap();
        assert_eq!(&header, frame::PROTOCOL_HEADER);
        let mut out = Vec::new();
        frame::method(
            &mut out,
            0,
            &AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
                version_major: 0,
                version_minor: 9,
                server_properties: FieldTable::default(),
                mechanisms: "PLAIN AMQPLAIN".into(),
                locales: "en_US".into(),
            })),
        );
        s.write_all(&out).await.unwrap();
        let mut buf = Vec::new();
        read_frame(&mut s, &mut buf).await; // start-ok
        out.clear();
        frame::method(
            &mut out,
            0,
            &AMQPClass::Connection(connection::AMQPMethod::Tune(connection::Tune {
                channel_max: 16,
                frame_max: 131_072,
                heartbeat: 1,
            })),
        );
        s.write_all(&out).await.unwrap();
        read_frame(&mut s, &mut buf).await; // tune-ok
        read_frame(&mut s, &mut buf).await; // open
        out.clear();
        frame::method(
            &mut out,
            0,
            &AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {})),
        );
        s.write_all(&out).await.unwrap();
        // Silent from here; count the client's heartbeats until it hangs up.
        let mut heartbeats = 0;
        let mut chunk = [0u8; 64];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return heartbeats,
                Ok(n) => {
                    heartbeats += chunk[..n]
                        .iter()
                        .filter(|b| **b == frame::HEARTBEAT)
                        .count()
                }
            }
        }
    });
    let mut o = options("/", "client-silent");
    o.port = port;
    o.mechanism = SASLMechanism::Plain;
    let conn = Connection::connect(&o).await.unwrap();
    let ch_err = match tokio::time::timeout(Duration::from_secs(10), conn.create_channel())
        .await
        .expect("the client gives up within a few heartbeats")
    {
        Err(e) => e,
        Ok(_) => panic!("the silent broker answered channel.open"),
    };
    assert!(
        matches!(ch_err, Error::MissedHeartbeats(s) if s >= 2),
        "{ch_err}"
    );
    assert!(!conn.is_connected());
    let heartbeats = tokio::time::timeout(Duration::from_secs(10), broker)
        .await
        .expect("the client hung up")
        .unwrap();
    assert!(
        heartbeats >= 2,
        "the client sent its own heartbeats: {heartbeats}"
    );
}
