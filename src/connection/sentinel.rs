//! Redis Sentinel: finding the master of the moment, and hearing failovers
//! announced.
//!
//! Every (re)connection asks the sentinels in turn, starting with the last one
//! that answered, `SENTINEL get-master-addr-by-name <master>`, then connects
//! there (the caller checks `ROLE`). Each sentinel's announcements are watched
//! on a Pub/Sub connection of its own, so a failover moves every connection as
//! soon as it is announced, not at the next error:
//!
//! * `+failover-state-send-slaveof-noone`: the leading sentinel has just told
//!   the chosen replica to become master. From here on, writes to the old
//!   master are lost when it is turned into a replica, so connections move to
//!   the promoted replica at once (a *hint*), although the sentinels still
//!   name the old master until the failover ends (about a second later).
//! * `+switch-master`: the failover is over; the sentinels name the new
//!   master, and the hint is dropped.
//! * `-failover-abort-slave-timeout`: the promotion failed; the hint is
//!   dropped. A hint also lapses after [`HINT_TTL`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::{Client, RedisConnectionInfo};

use super::topology::Kind;
use super::{
    Connector, Timeouts, TlsSetup, connect_to_sentinel, node_client, parse_addr, settings,
};
use crate::error::{ConfigError, Error};
use crate::util::Retry;

pub(crate) struct Sentinels {
    master: String,
    /// One client per sentinel address, in the configured order.
    sentinels: Vec<(String, Client)>,
    /// Credentials and database for the master.
    master_settings: RedisConnectionInfo,
    tls: Option<TlsSetup>,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
    /// The replica being promoted, while a failover is under way.
    hint: Arc<Mutex<Option<Hint>>>,
    timeouts: Timeouts,
}

/// The address of the replica a failover is promoting, and when it was
/// announced.
struct Hint {
    host: String,
    port: u16,
    at: Instant,
}

/// How long a promotion hint is followed without the sentinels confirming it.
const HINT_TTL: Duration = Duration::from_secs(30);

/// The channels listened to on every sentinel.
const CHANNELS: [&str; 3] = [
    "+switch-master",
    "+failover-state-send-slaveof-noone",
    "-failover-abort-slave-timeout",
];

fn invalid(reason: String) -> ConfigError {
    ConfigError::Invalid {
        kind: None,
        key: String::new(),
        option: "sentinel",
        reason,
    }
}

impl Sentinels {
    pub(crate) fn new(
        kind: &Kind,
        tls: Option<TlsSetup>,
        timeouts: Timeouts,
    ) -> Result<Self, ConfigError> {
        let Kind::Sentinel {
            master,
            sentinels,
            master_auth,
            sentinel_auth,
            db,
        } = kind
        else {
            unreachable!("Sentinels::new is called for the sentinel topology only");
        };
        if master.is_empty() {
            return Err(invalid("the master name is empty".into()));
        }
        if sentinels.is_empty() {
            return Err(invalid("no sentinel address given".into()));
        }
        let mut clients = Vec::with_capacity(sentinels.len());
        for addr in sentinels {
            let (host, port) =
                parse_addr(addr).ok_or_else(|| invalid(format!("{addr:?} is not host:port")))?;
            let client = node_client(&host, port, &settings(sentinel_auth), tls.as_ref())
                .map_err(|e| invalid(format!("{addr:?}: {e}")))?;
            clients.push((addr.clone(), client));
        }
        Ok(Sentinels {
            master: master.clone(),
            sentinels: clients,
            master_settings: settings(master_auth).set_db(*db),
            tls,
            preferred: AtomicUsize::new(0),
            hint: Arc::default(),
            timeouts,
        })
    }

    /// Asks the sentinels, in turn, where the master is; a client for it.
    ///
    /// # Errors
    /// The last sentinel's error when none answered; [`Error::NoMaster`]
    /// when those that answered do not know the master.
    pub(crate) async fn master_client(&self) -> Result<Client, Error> {
        let n = self.sentinels.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut last = None;
        for i in (0..n).map(|k| (first + k) % n) {
            let (addr, sentinel) = &self.sentinels[i];
            let answer: Result<Option<(String, u16)>, Error> = async {
                let mut conn = connect_to_sentinel(sentinel, self.timeouts.connect).await?;
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(&self.master)
                    .query_async(&mut conn)
                    .await
                    .map_err(Error::from_redis)
            }
            .await;
            match answer {
                Ok(Some((host, port))) => {
                    self.preferred.store(i, Ordering::Relaxed);
                    let (host, port) = self.follow_hint(host, port);
                    return node_client(&host, port, &self.master_settings, self.tls.as_ref())
                        .map_err(Error::from_redis);
                }
                Ok(None) => {
                    last = Some(Error::NoMaster {
                        master: self.master.clone(),
                        sentinel: addr.clone(),
                    })
                }
                Err(e) => {
                    tracing::debug!(sentinel = %addr, error = %e, "sentinel did not answer");
                    last = Some(e);
                }
            }
        }
        Err(last.expect("at least one sentinel"))
    }

    /// Where to connect, given the sentinels' answer: the promoted replica
    /// while a failover is under way, else the answer (which ends the hint
    /// once the sentinels name the promoted replica themselves).
    fn follow_hint(&self, host: String, port: u16) -> (String, u16) {
        let mut hint = self.hint.lock().expect("hint lock");
        match &*hint {
            Some(h) if (h.host != host || h.port != port) && h.at.elapsed() < HINT_TTL => {
                (h.host.clone(), h.port)
            }
            Some(_) => {
                *hint = None;
                (host, port)
            }
            None => (host, port),
        }
    }

    /// Listens for failover announcements on every sentinel until the guard
    /// drops.
    pub(crate) fn watch(&self, connector: Connector) -> Watcher {
        let tasks = self
            .sentinels
            .iter()
            .map(|(addr, client)| {
                actix_rt::spawn(listen(
                    addr.clone(),
                    client.clone(),
                    self.master.clone(),
                    self.hint.clone(),
                    connector.clone(),
                ))
            })
            .collect();
        Watcher(tasks)
    }
}

/// Stops the `+switch-master` listeners when dropped.
pub(crate) struct Watcher(Vec<actix_rt::task::JoinHandle<()>>);

impl Drop for Watcher {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// One sentinel's failover announcements, reconnecting with backoff.
async fn listen(
    addr: String,
    client: Client,
    master: String,
    hint: Arc<Mutex<Option<Hint>>>,
    connector: Connector,
) {
    let mut retry = Retry::default();
    loop {
        let subscribed = async {
            let connect_timeout = connector.timeouts().connect;
            let mut pubsub = tokio::time::timeout(connect_timeout, client.get_async_pubsub())
                .await
                .map_err(|_| "connect timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            pubsub
                .subscribe(&CHANNELS[..])
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(pubsub)
        }
        .await;
        let error = match subscribed {
            Ok(pubsub) => {
                if retry.succeeded() > 0 {
                    tracing::info!(sentinel = %addr, "listening for failovers again");
                }
                let mut messages = pubsub.into_on_message();
                while let Some(msg) = messages.next().await {
                    let Ok(text) = msg.get_payload::<String>() else {
                        continue;
                    };
                    if on_announcement(msg.get_channel_name(), &text, &master, &hint) {
                        tracing::warn!(
                            sentinel = %addr, master = %master, channel = %msg.get_channel_name(), message = %text,
                            "sentinel announced a failover; moving connections to the new master"
                        );
                        connector.failover_seen();
                    }
                }
                "the connection was lost".to_owned()
            }
            Err(e) => e,
        };
        let (delay, log) = retry.failed();
        if log {
            tracing::warn!(sentinel = %addr, error = %error, failures = retry.failures(), "cannot listen for failovers on this sentinel; retrying");
        }
        tokio::time::sleep(delay).await;
    }
}

/// Applies one announcement; answers whether connections should move.
///
/// * `+switch-master`: `<master> <old-ip> <old-port> <new-ip> <new-port>`;
/// * `+failover-state-send-slaveof-noone` and `-failover-abort-slave-timeout`:
///   `slave <ip>:<port> <ip> <port> @ <master> <master-ip> <master-port>`.
fn on_announcement(channel: &str, text: &str, master: &str, hint: &Mutex<Option<Hint>>) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    match channel {
        "+switch-master" if words.first() == Some(&master) => {
            *hint.lock().expect("hint lock") = None;
            true
        }
        "+failover-state-send-slaveof-noone" if words.get(5) == Some(&master) => {
            let (Some(host), Some(Ok(port))) = (words.get(2), words.get(3).map(|p| p.parse()))
            else {
                return false;
            };
            *hint.lock().expect("hint lock") = Some(Hint {
                host: (*host).to_owned(),
                port,
                at: Instant::now(),
            });
            true
        }
        "-failover-abort-slave-timeout" if words.get(5) == Some(&master) => {
            *hint.lock().expect("hint lock") = None;
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;
