//! Redis Sentinel: finding the master of the moment, and hearing failovers
//! announced.
//!
//! Every (re)connection asks the sentinels in turn, starting with the last one
//! that answered, `SENTINEL get-master-addr-by-name <master>`, then connects
//! there (the caller checks `ROLE`). Each sentinel's `+switch-master` channel
//! is watched on a Pub/Sub connection of its own, so a failover moves every
//! connection as soon as it is announced, not at the next error.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::topology::{Credentials, Kind};
use super::{CONNECT_TIMEOUT, Connector, TlsSetup, backoff, connect_to_sentinel};
use crate::error::{ConfigError, Error};

pub(crate) struct Sentinels {
    master: String,
    /// One client per sentinel address, in the configured order.
    sentinels: Vec<(String, Client)>,
    /// Credentials and database for the master.
    master_settings: RedisConnectionInfo,
    tls: Option<TlsSetup>,
    /// The sentinel that answered last: asked first next time.
    preferred: AtomicUsize,
}

fn settings(auth: &Credentials) -> RedisConnectionInfo {
    let mut s = RedisConnectionInfo::default();
    if let Some(u) = &auth.username {
        s = s.set_username(u);
    }
    if let Some(p) = &auth.password {
        s = s.set_password(p);
    }
    s
}

fn invalid(reason: String) -> ConfigError {
    ConfigError::Invalid {
        stream: String::new(),
        option: "sentinel",
        reason,
    }
}

impl Sentinels {
    pub(crate) fn new(kind: &Kind, tls: Option<TlsSetup>) -> Result<Self, ConfigError> {
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
            let (host, port) = addr
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
                .filter(|(h, _)| !h.is_empty())
                .ok_or_else(|| invalid(format!("{addr:?} is not host:port")))?;
            let info = (host, port)
                .into_connection_info()
                .map_err(|e| invalid(format!("{addr:?}: {e}")))?
                .set_redis_settings(settings(sentinel_auth));
            let client =
                client_for(info, tls.as_ref()).map_err(|e| invalid(format!("{addr:?}: {e}")))?;
            clients.push((addr.clone(), client));
        }
        Ok(Sentinels {
            master: master.clone(),
            sentinels: clients,
            master_settings: settings(master_auth).set_db(*db),
            tls,
            preferred: AtomicUsize::new(0),
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
                let mut conn = connect_to_sentinel(sentinel).await?;
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
                    let info = (host.as_str(), port)
                        .into_connection_info()
                        .map_err(Error::from_redis)?
                        .set_redis_settings(self.master_settings.clone());
                    return client_for(info, self.tls.as_ref()).map_err(Error::from_redis);
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

    /// Listens for `+switch-master` on every sentinel until the guard drops.
    pub(crate) fn watch(&self, connector: Connector) -> Watcher {
        let tasks = self
            .sentinels
            .iter()
            .map(|(addr, client)| {
                actix_rt::spawn(listen(
                    addr.clone(),
                    client.clone(),
                    self.master.clone(),
                    connector.clone(),
                ))
            })
            .collect();
        Watcher(tasks)
    }
}

fn client_for(info: ConnectionInfo, tls: Option<&TlsSetup>) -> redis::RedisResult<Client> {
    match tls {
        Some(t) => t.client(info),
        None => {
            debug_assert!(matches!(info.addr(), ConnectionAddr::Tcp(..)));
            Client::open(info)
        }
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

/// One sentinel's `+switch-master` announcements, reconnecting with backoff.
/// The message is `<master> <old-ip> <old-port> <new-ip> <new-port>`.
async fn listen(addr: String, client: Client, master: String, connector: Connector) {
    let mut delays = backoff();
    let mut failures = 0u32;
    loop {
        let subscribed = async {
            let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
                .await
                .map_err(|_| "connect timed out".to_owned())?
                .map_err(|e| e.to_string())?;
            pubsub
                .subscribe("+switch-master")
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>(pubsub)
        }
        .await;
        match subscribed {
            Ok(pubsub) => {
                if failures > 0 {
                    tracing::info!(sentinel = %addr, "listening for failovers again");
                }
                failures = 0;
                delays = backoff();
                let mut messages = pubsub.into_on_message();
                while let Some(msg) = messages.next().await {
                    let Ok(text) = msg.get_payload::<String>() else {
                        continue;
                    };
                    let mut words = text.split_whitespace();
                    if words.next() == Some(master.as_str()) {
                        let new: Vec<&str> = words.skip(2).collect();
                        tracing::warn!(
                            sentinel = %addr, master = %master, new_master = %new.join(":"),
                            "sentinel announced a failover; moving connections to the new master"
                        );
                        connector.failover_seen();
                    }
                }
            }
            Err(e) => {
                failures += 1;
                if failures.is_power_of_two() {
                    tracing::warn!(sentinel = %addr, error = %e, failures, "cannot listen for failovers on this sentinel; retrying");
                }
            }
        }
        tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(10))).await;
    }
}
