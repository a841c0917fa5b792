//! The `test-util` feature: a whole-message handler and a context
//! handler unit-tested without Redis, and a throwaway redis-server for
//! integration tests that leaves nothing behind.

use rillkit::test_util::{self, RedisServer};
use rillkit::{Broker, HandlerError, HandlerResult, Json, Message, Stream};

async fn charge(msg: Message) -> HandlerResult {
    let cents: u64 = msg.decode(&Json)?;
    if cents == 0 {
        return Err(HandlerError::reject(format!(
            "{}: nothing to charge",
            msg.id
        )));
    }
    if msg.is_redelivery() && msg.field("idempotency-key").is_none() {
        return Err(HandlerError::reject("a retry needs an idempotency key"));
    }
    Ok(())
}

#[actix_rt::test]
async fn a_whole_message_handler_is_unit_tested_without_redis() {
    let ok = test_util::message("payments", "1-0", b"250").build();
    assert!(charge(ok).await.is_ok());
    let zero = test_util::message("payments", "2-0", b"0").build();
    assert!(charge(zero).await.unwrap_err().is_reject());
    let retry = test_util::message("payments", "3-0", b"250")
        .delivery_count(2)
        .build();
    assert!(charge(retry).await.unwrap_err().is_reject());
    let keyed = test_util::message("payments", "3-0", b"250")
        .delivery_count(2)
        .field("idempotency-key", b"k1")
        .build();
    assert!(charge(keyed).await.is_ok());
    let undecodable = test_util::message("payments", "4-0", b"\"x\"").build();
    assert!(
        !charge(undecodable).await.unwrap_err().is_reject(),
        "`?` retries"
    );
}

#[actix_rt::test]
async fn a_throwaway_server_serves_a_broker_and_leaves_nothing_behind() {
    let redis = RedisServer::start().expect("redis-server on PATH");
    let s = Stream::new("t", "g");
    let broker = Broker::builder(redis.url()).build().unwrap();
    broker.start().await.unwrap();
    broker.publish(&s, &1u64).await.unwrap();
    let d = test_util::message("t", "1-0", b"1").delivery(&broker);
    assert_eq!((d.stream(), d.delivery_count()), ("t", 1));
    d.broker().publish(&s, &2u64).await.unwrap();
    assert_eq!(broker.stop().await.unwrap().exit_code(), 0);
    let port = redis.port();
    drop(redis);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the server is gone"
    );
}
