//! A Redis Cluster of three masters (no replicas) on 127.0.0.1, created with
//! `redis-cli --cluster create`, all killed on drop; and slot migration done
//! the way an operator does it (`CLUSTER SETSLOT … IMPORTING`/`MIGRATING`,
//! `MIGRATE`, `CLUSTER SETSLOT … NODE`), whole or step by step.
//!
//! Set `RILLKIT_REDIS_CLI` to use another binary than `redis-cli` on the
//! `PATH` (and `RILLKIT_REDIS_SERVER` for the servers, as everywhere).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port, info_field, try_conn};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How long [`RedisCluster::start`] and [`Migration::finish`] wait for every
/// node to agree before the harness gives up.
const SETTLE: Duration = Duration::from_secs(30);

/// How often the nodes' views are polled (each poll opens one connection per
/// node and asks `CLUSTER INFO` and `CLUSTER SLOTS`).
const POLL: Duration = Duration::from_millis(50);

/// How long `MIGRATE` may wait on the target, in milliseconds.
const MIGRATE_TIMEOUT_MS: u64 = 5000;

/// The `redis-cli` binary: `RILLKIT_REDIS_CLI` or the one on the `PATH`.
fn redis_cli_bin() -> String {
    std::env::var("RILLKIT_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

/// One node's `CLUSTER SLOTS` as `(first slot, last slot, master port)`
/// ranges, sorted; `None` when the node cannot be asked.
type SlotMap = Vec<(u16, u16, u16)>;

/// The master port that owns `slot` in `map`.
fn owner_in(map: &SlotMap, slot: u16) -> Option<u16> {
    map.iter()
        .find(|(first, last, _)| (*first..=*last).contains(&slot))
        .map(|(_, _, port)| *port)
}

/// `CLUSTER SLOTS` of the node on `port`, or `None` when it cannot be asked
/// or answers something unexpected.
fn slot_map(port: u16) -> Option<SlotMap> {
    let reply: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut try_conn(port)?)
        .ok()?;
    let mut map = reply
        .iter()
        .map(|range| {
            // [first, last, [ip, port, id, …] of the master, replicas…]
            let first = redis::from_redis_value_ref(range.first()?).ok()?;
            let last = redis::from_redis_value_ref(range.get(1)?).ok()?;
            let redis::Value::Array(master) = range.get(2)? else {
                return None;
            };
            let port = redis::from_redis_value_ref(master.get(1)?).ok()?;
            Some((first, last, port))
        })
        .collect::<Option<SlotMap>>()?;
    map.sort_unstable();
    Some(map)
}

/// `CLUSTER INFO`'s `cluster_state` on the node on `port`.
fn cluster_state(port: u16) -> Option<String> {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut try_conn(port)?)
        .ok()?;
    info_field(&info, "cluster_state")
}

/// Three `redis-server --cluster-enabled yes` masters (no replicas,
/// `cluster-node-timeout 5000`), their 16384 slots spread evenly by
/// `redis-cli --cluster create`. Every node has its own `nodes.conf` in its
/// temp dir and its own free `--cluster-port` (the bus port), so the default
/// port + 10000 cannot clash with anything.
///
/// Measured here (2 cores, redis 7.0.15): [`RedisCluster::start`] takes
/// about 2.1 s: the nodes start in ~0.1 s, `redis-cli` takes ~1 s (it sleeps
/// a second while the nodes meet), and the nodes say `cluster_state:ok` only
/// 2 s after they started (Redis keeps a fresh master out of `ok` that
/// long). [`RedisCluster::migrate_slot`] of a slot with a few keys takes
/// about 10 ms.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// What `redis-cli --cluster create` printed, for failure messages.
    create_output: String,
}

impl RedisCluster {
    /// Starts the three nodes, creates the cluster with `redis-cli --cluster
    /// create … --cluster-replicas 0 --cluster-yes`, and waits (up to 30 s)
    /// until it has [settled](RedisCluster::settled).
    ///
    /// # Panics
    /// When a node does not start, `redis-cli` fails, or the cluster does not
    /// settle in time; the message has `redis-cli`'s output, every node's
    /// view of the cluster, and every node's log.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let bus_port = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    // Relative to `--dir`, the server's own temp dir.
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    &bus_port,
                    "--cluster-node-timeout",
                    "5000",
                    "--appendonly",
                    "no",
                ])
            })
            .collect();
        let mut cluster = RedisCluster {
            nodes,
            create_output: String::new(),
        };
        let mut cmd = Command::new(redis_cli_bin());
        cmd.args(["--cluster", "create"])
            .args(cluster.seeds())
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null());
        let out = cmd.output().unwrap_or_else(|e| {
            panic!("could not start redis-cli ({cmd:?}): {e} (set RILLKIT_REDIS_CLI)")
        });
        cluster.create_output = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{cmd:?} failed ({}):\n{}",
            out.status,
            cluster.diagnostics()
        );
        cluster.wait_until(
            "the cluster settled (cluster_state:ok, all nodes agree)",
            || cluster.settled(),
        );
        cluster
    }

    /// The three nodes, all masters.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// The nodes' addresses, `127.0.0.1:<port>`, to seed a cluster client.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// `CLUSTER MYID` of node `node`.
    ///
    /// # Panics
    /// When the node does not answer.
    pub fn node_id(&self, node: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[node].conn())
            .expect("CLUSTER MYID")
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of the first node
    /// that answers).
    ///
    /// # Panics
    /// When no node answers.
    pub fn slot_of(&self, key: &str) -> u16 {
        self.nodes
            .iter()
            .find_map(|n| {
                redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query(&mut try_conn(n.port)?)
                    .ok()
            })
            .unwrap_or_else(|| panic!("no cluster node answers CLUSTER KEYSLOT {key}"))
    }

    /// The index in [`RedisCluster::nodes`] of the master that owns `slot`
    /// now: the one node whose own `CLUSTER SLOTS` gives the slot to itself.
    /// During a migration that is still the source (ownership changes only
    /// with [`Migration::finish`]), and right after one every node already
    /// says so.
    ///
    /// # Panics
    /// When not exactly one node claims the slot (e.g. its owner is stopped).
    pub fn owner_of_slot(&self, slot: u16) -> usize {
        let claimants: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                let port = self.nodes[i].port;
                slot_map(port).is_some_and(|map| owner_in(&map, slot) == Some(port))
            })
            .collect();
        match claimants[..] {
            [owner] => owner,
            _ => panic!(
                "{} nodes ({claimants:?}) claim slot {slot}:\n{}",
                claimants.len(),
                self.views()
            ),
        }
    }

    /// A plain synchronous connection to the node that owns `key`'s slot, to
    /// check what is in Redis without a cluster client.
    pub fn conn_for_key(&self, key: &str) -> redis::Connection {
        self.nodes[self.owner_of_slot(self.slot_of(key))].conn()
    }

    /// Moves `slot`, keys included, from its owner to node `to`, as an
    /// operator does: [`RedisCluster::begin_migration`], then
    /// [`Migration::move_keys`], then [`Migration::finish`]. Returns once
    /// every node reports the new owner.
    ///
    /// # Panics
    /// When `to` owns the slot already, or a step fails or is late.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let m = self.begin_migration(slot, to);
        m.move_keys(self);
        m.finish(self);
    }

    /// Starts moving `slot` from its owner to node `to`: `CLUSTER SETSLOT
    /// <slot> IMPORTING <source id>` on the target, then `CLUSTER SETSLOT
    /// <slot> MIGRATING <target id>` on the source. From then on the source
    /// answers `-ASK` for keys of the slot it no longer has, and the target
    /// serves them only after `ASKING`.
    ///
    /// # Panics
    /// When `to` owns the slot already or a node refuses.
    pub fn begin_migration(&self, slot: u16, to: usize) -> Migration {
        let from = self.owner_of_slot(slot);
        assert_ne!(from, to, "node {to} owns slot {slot} already");
        let m = Migration {
            slot,
            from,
            to,
            from_id: self.node_id(from),
            to_id: self.node_id(to),
        };
        self.setslot(to, slot, &["IMPORTING", &m.from_id]);
        self.setslot(from, slot, &["MIGRATING", &m.to_id]);
        m
    }

    /// `CLUSTER SETSLOT <slot> <args…>` on node `node`.
    fn setslot(&self, node: usize, slot: u16, args: &[&str]) {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(args)
            .query(&mut self.nodes[node].conn())
            .unwrap_or_else(|e| panic!("CLUSTER SETSLOT {slot} {args:?} on node {node}: {e}"));
    }

    /// How many times `cmd` (lower case) ran on all nodes together, from
    /// their `INFO commandstats`.
    pub fn command_calls_total(&self, cmd: &str) -> u64 {
        self.nodes.iter().map(|n| n.command_calls(cmd)).sum()
    }

    /// Whether the cluster is in a steady state: every node says
    /// `cluster_state:ok`, and every node's `CLUSTER SLOTS` covers all 16384
    /// slots with exactly the three nodes as masters, the same on all.
    pub fn settled(&self) -> bool {
        let ports: BTreeSet<u16> = self.nodes.iter().map(|n| n.port).collect();
        let mut first: Option<SlotMap> = None;
        self.nodes.iter().all(|n| {
            let Some(map) = slot_map(n.port) else {
                return false;
            };
            let covered: u32 = map.iter().map(|(a, b, _)| u32::from(b - a) + 1).sum();
            let masters: BTreeSet<u16> = map.iter().map(|(_, _, p)| *p).collect();
            let same = match &first {
                None => {
                    first = Some(map.clone());
                    true
                }
                Some(f) => *f == map,
            };
            cluster_state(n.port).as_deref() == Some("ok")
                && covered == u32::from(SLOTS)
                && masters == ports
                && same
        })
    }

    /// Polls `cond` every 50 ms for up to 30 s.
    ///
    /// # Panics
    /// When it does not hold in time; the message has
    /// [`RedisCluster::diagnostics`].
    fn wait_until(&self, what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + SETTLE;
        while !cond() {
            assert!(
                Instant::now() < deadline,
                "timed out after {SETTLE:?} waiting for: {what}\n{}",
                self.diagnostics()
            );
            std::thread::sleep(POLL);
        }
    }

    /// Every node's `cluster_state` and `CLUSTER NODES`.
    pub fn views(&self) -> String {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let nodes: Option<String> = try_conn(n.port)
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("NODES").query(&mut c).ok());
                format!(
                    "---- node {i} (port {}): cluster_state {} ----\n{}",
                    n.port,
                    cluster_state(n.port).as_deref().unwrap_or("?"),
                    nodes.as_deref().unwrap_or("(CLUSTER NODES failed)\n"),
                )
            })
            .collect()
    }

    /// `redis-cli --cluster create`'s output, [`RedisCluster::views`] and
    /// every node's log, for a failing test's message.
    pub fn diagnostics(&self) -> String {
        let logs: String = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("---- node {i} (port {}) log ----\n{}", n.port, n.log()))
            .collect();
        format!(
            "---- redis-cli --cluster create ----\n{}{}{logs}",
            self.create_output,
            self.views()
        )
    }
}

/// A slot migration begun by [`RedisCluster::begin_migration`]: the slot is
/// `IMPORTING` on the target and `MIGRATING` on the source until
/// [`Migration::finish`].
#[derive(Debug)]
pub struct Migration {
    slot: u16,
    from: usize,
    to: usize,
    from_id: String,
    to_id: String,
}

impl Migration {
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// Index of the source node in [`RedisCluster::nodes`].
    pub fn from(&self) -> usize {
        self.from
    }

    /// Index of the target node in [`RedisCluster::nodes`].
    pub fn to(&self) -> usize {
        self.to
    }

    /// Moves every key of the slot from the source to the target: `CLUSTER
    /// GETKEYSINSLOT <slot> 100` on the source and `MIGRATE 127.0.0.1 <target
    /// port> "" 0 5000 KEYS …` until the source has none left. Returns how
    /// many keys were moved.
    ///
    /// # Panics
    /// When `MIGRATE` fails or keys are still left after 30 s.
    pub fn move_keys(&self, cluster: &RedisCluster) -> usize {
        let source = &cluster.nodes[self.from];
        let target_port = cluster.nodes[self.to].port;
        let mut conn = source.conn();
        let deadline = Instant::now() + SETTLE;
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(self.slot)
                .arg(100)
                .query(&mut conn)
                .expect("CLUSTER GETKEYSINSLOT");
            if keys.is_empty() {
                return moved;
            }
            assert!(
                Instant::now() < deadline,
                "slot {} still has {} keys on node {} after {SETTLE:?} of MIGRATE",
                self.slot,
                keys.len(),
                self.from
            );
            // `OK`, or `NOKEY` when every key has gone meanwhile.
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(target_port)
                .arg("")
                .arg(0)
                .arg(MIGRATE_TIMEOUT_MS)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut conn)
                .unwrap_or_else(|e| {
                    panic!(
                        "MIGRATE of {} keys of slot {} from node {} to node {}: {e}",
                        keys.len(),
                        self.slot,
                        self.from,
                        self.to
                    )
                });
            moved += keys.len();
        }
    }

    /// Ends the migration: `CLUSTER SETSLOT <slot> NODE <target id>` on the
    /// target, then the source, then the third node; then waits (up to 30 s)
    /// until every node's `CLUSTER SLOTS` gives the slot to the target.
    ///
    /// # Panics
    /// When a node refuses (the source does while it still has keys of the
    /// slot) or the nodes do not agree in time.
    pub fn finish(&self, cluster: &RedisCluster) {
        let others = (0..cluster.nodes.len()).filter(|&i| i != self.from && i != self.to);
        for node in [self.to, self.from].into_iter().chain(others) {
            cluster.setslot(node, self.slot, &["NODE", &self.to_id]);
        }
        let target_port = cluster.nodes[self.to].port;
        cluster.wait_until(
            &format!(
                "every node gives slot {} to node {} (port {target_port})",
                self.slot, self.to
            ),
            || {
                cluster.nodes.iter().all(|n| {
                    slot_map(n.port).is_some_and(|m| owner_in(&m, self.slot) == Some(target_port))
                })
            },
        );
    }
}
