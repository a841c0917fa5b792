//! A Redis Sentinel deployment: one master, one replica, three sentinels, all
//! on 127.0.0.1, all killed on drop.
#![allow(dead_code)]

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use super::process::Process;
use super::{RedisServer, eventually_blocking_every, redis_server_bin};

/// How long [`SentinelGroup::start`] and each half of
/// [`SentinelGroup::failover`] may take before the harness gives up.
const SETTLE: Duration = Duration::from_secs(30);

/// How often the group's state is polled (each poll opens ~15 connections).
const POLL: Duration = Duration::from_millis(100);

/// One `redis-server <conf> --sentinel` process.
struct Sentinel {
    process: Process,
    port: u16,
}

impl Sentinel {
    fn start(master_name: &str, master_port: u16) -> Sentinel {
        let mut process = Process::new("sentinel");
        let port = process.port;
        let conf = process.dir().join("sentinel.conf");
        // Sentinels rewrite their config (known replicas, sentinels, epochs),
        // so it lives in the writable temp dir.
        std::fs::write(
            &conf,
            format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 dir {dir}\n\
                 logfile {log}\n\
                 sentinel monitor {master_name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {master_name} 1000\n\
                 sentinel failover-timeout {master_name} 5000\n\
                 sentinel parallel-syncs {master_name} 1\n",
                dir = process.dir().display(),
                log = process.log_path().display(),
            ),
        )
        .expect("write sentinel.conf");
        let mut cmd = Command::new(redis_server_bin());
        cmd.arg(&conf).arg("--sentinel");
        process.spawn(cmd, |port| sentinel_conn(port).is_some());
        Sentinel { process, port }
    }

    fn conn(&self) -> Option<redis::Connection> {
        sentinel_conn(self.port)
    }

    /// `SENTINEL <sub> <args…>`, or `None` when the sentinel cannot be asked.
    fn sentinel<T: redis::FromRedisValue>(&self, sub: &str, args: &[&str]) -> Option<T> {
        redis::cmd("SENTINEL")
            .arg(sub)
            .arg(args)
            .query(&mut self.conn()?)
            .ok()
    }

    /// The master's port as this sentinel reports it.
    fn master_port(&self, name: &str) -> Option<u16> {
        let addr: Option<Vec<String>> = self.sentinel("get-master-addr-by-name", &[name])?;
        addr?.get(1)?.parse().ok()
    }

    /// `SENTINEL replicas` / `SENTINEL sentinels` as field maps.
    fn instances(&self, sub: &str, name: &str) -> Option<Vec<HashMap<String, String>>> {
        let list: Vec<Vec<String>> = self.sentinel(sub, &[name])?;
        Some(
            list.into_iter()
                .map(|fields| {
                    fields
                        .chunks(2)
                        .filter_map(|kv| Some((kv.first()?.clone(), kv.get(1)?.clone())))
                        .collect()
                })
                .collect(),
        )
    }

    fn log(&self) -> String {
        self.process.log()
    }
}

/// A connection to the sentinel on `port` that answered PING.
fn sentinel_conn(port: u16) -> Option<redis::Connection> {
    let mut c = super::try_conn(port)?;
    redis::cmd("PING").query::<String>(&mut c).ok()?;
    Some(c)
}

/// One master, one replica and three sentinels (quorum 2,
/// `down-after-milliseconds 1000`, `failover-timeout 5000`,
/// `parallel-syncs 1`) monitoring them under one master name.
///
/// Measured here (2 cores, redis 7.0.15): [`SentinelGroup::start`] takes
/// about 2–3 s (sentinels discover each other through hello messages every
/// 2 s); [`SentinelGroup::failover`] about 11 s, nearly all of it Sentinel
/// waiting 8 s (4 × its 2 s publish period) before it turns the old master,
/// which still claims to be a master, into a replica.
pub struct SentinelGroup {
    // Sentinels first: they are killed before the data nodes on drop.
    sentinels: Vec<Sentinel>,
    nodes: [RedisServer; 2],
    name: String,
}

impl SentinelGroup {
    /// Starts the master, its replica (`--replicaof`), and three sentinels,
    /// and waits (up to 30 s) until the group has settled: see
    /// [`SentinelGroup::settled`].
    ///
    /// # Panics
    /// When a process does not start or the group does not settle in time;
    /// every log is printed then.
    pub fn start(master_name: &str) -> SentinelGroup {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(&master);
        let sentinels = (0..3)
            .map(|_| Sentinel::start(master_name, master.port))
            .collect();
        let g = SentinelGroup {
            sentinels,
            nodes: [master, replica],
            name: master_name.to_owned(),
        };
        g.wait_settled(g.nodes[0].port);
        g
    }

    /// The monitored master's name.
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// The sentinels' addresses, `127.0.0.1:<port>`.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The two data servers (started as master and replica; which is which
    /// now: [`SentinelGroup::current_master_port`]).
    pub fn nodes(&self) -> &[RedisServer; 2] {
        &self.nodes
    }

    /// The master's port as the first sentinel that answers reports it.
    ///
    /// # Panics
    /// When no sentinel answers.
    pub fn current_master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(|s| s.master_port(&self.name))
            .expect("no sentinel reports the master")
    }

    /// The data server that is master now (by the sentinels).
    pub fn master(&self) -> &RedisServer {
        let port = self.current_master_port();
        self.node(port)
    }

    /// The data server that is replica now (by the sentinels).
    pub fn replica(&self) -> &RedisServer {
        let port = self.current_master_port();
        self.nodes
            .iter()
            .find(|n| n.port != port)
            .expect("two nodes")
    }

    fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("sentinels report unknown master port {port}"))
    }

    /// Kills the master of the moment (SIGKILL). The sentinels take it for
    /// down after 1 s and promote the replica.
    pub fn kill_master(&mut self) {
        let port = self.current_master_port();
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("the master is one of the nodes")
            .stop();
    }

    /// A plain synchronous connection to the master of the moment.
    pub fn conn_to_master(&self) -> redis::Connection {
        self.master().conn()
    }

    /// `SENTINEL FAILOVER <name>` on the first sentinel, then waits (up to
    /// 30 s) until every sentinel reports the other node as master, its
    /// `ROLE` is `master` and the old master's is `slave`; then (up to 30 s
    /// more) until the group has [settled](SentinelGroup::settled) again, so
    /// that another failover can follow at once. Returns the new master's
    /// port.
    ///
    /// Takes about 11 s here; see [`SentinelGroup`].
    ///
    /// # Panics
    /// When a sentinel refuses, or the switch or the settling is late.
    pub fn failover(&self) -> u16 {
        let old = self.current_master_port();
        let new = self
            .nodes
            .iter()
            .find(|n| n.port != old)
            .expect("two nodes")
            .port;
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(&self.name)
            .query(&mut self.sentinels[0].conn().expect("sentinel answers"))
            .expect("SENTINEL FAILOVER");
        eventually_blocking_every(
            &format!("failover of {} from port {old} to {new}", self.name),
            SETTLE,
            POLL,
            || {
                self.sentinels
                    .iter()
                    .all(|s| s.master_port(&self.name) == Some(new))
                    && try_role(self.node(new)).as_deref() == Some("master")
                    && try_role(self.node(old)).as_deref() == Some("slave")
            },
        );
        self.wait_settled(new);
        new
    }

    /// Whether the group is in a steady state with the master on
    /// `master_port`: the master's `ROLE` is `master`; the other node's
    /// replication link to it is up; and every sentinel reports that master,
    /// lists that one replica with no `s_down`/`o_down`/`disconnected` flag,
    /// and knows the 2 other sentinels.
    pub fn settled(&self, master_port: u16) -> bool {
        let master = self.node(master_port);
        let Some(replica) = self.nodes.iter().find(|n| n.port != master_port) else {
            return false;
        };
        let replica_name = format!("127.0.0.1:{}", replica.port);
        try_role(master).as_deref() == Some("master")
            && replica.master_link_up()
            && replica.try_info("replication", "master_port") == Some(master_port.to_string())
            && self.sentinels.iter().all(|s| {
                s.master_port(&self.name) == Some(master_port)
                    && s.instances("replicas", &self.name).is_some_and(|rs| {
                        rs.len() == 1
                            && rs.iter().all(|r| {
                                r.get("name") == Some(&replica_name)
                                    && r.get("flags").is_some_and(|f| {
                                        !f.contains("s_down")
                                            && !f.contains("o_down")
                                            && !f.contains("disconnected")
                                    })
                            })
                    })
                    && s.instances("sentinels", &self.name)
                        .is_some_and(|ss| ss.len() == 2)
            })
    }

    fn wait_settled(&self, master_port: u16) {
        eventually_blocking_every(
            &format!(
                "sentinel group {} settled with master on port {master_port}",
                self.name
            ),
            SETTLE,
            POLL,
            || self.settled(master_port),
        );
    }

    /// Every sentinel's log, for a failing test's message.
    pub fn sentinel_logs(&self) -> String {
        self.sentinels
            .iter()
            .map(|s| format!("---- sentinel {} ----\n{}", s.port, s.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `ROLE`'s first field, or `None` when the server cannot be asked.
fn try_role(s: &RedisServer) -> Option<String> {
    let reply: Vec<redis::Value> = redis::cmd("ROLE")
        .query(&mut super::try_conn(s.port)?)
        .ok()?;
    redis::from_redis_value(reply.into_iter().next()?).ok()
}
