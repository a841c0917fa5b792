//! A Redis Cluster of three masters on 127.0.0.1, without replicas
//! ([`RedisCluster::start`]) or with one replica each
//! ([`RedisCluster::start_with_replicas`]), created with `redis-cli --cluster
//! create`, all killed on drop; slot migration done the way an operator does
//! it (`CLUSTER SETSLOT … IMPORTING`/`MIGRATING`, `MIGRATE`, `CLUSTER SETSLOT
//! … NODE`), whole or step by step; and a master's manual failover to its
//! replica (`CLUSTER FAILOVER`, [`RedisCluster::failover`]).
//!
//! Set `RILLKIT_REDIS_CLI` to use another binary than `redis-cli` on the
//! `PATH` (and `RILLKIT_REDIS_SERVER` for the servers, as everywhere).
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{RedisServer, free_port, info_field, redis_cli_bin, try_conn};

/// Number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How long [`RedisCluster::start`], [`Migration::finish`] and
/// [`RedisCluster::failover`] wait for every node to agree before the harness
/// gives up.
const SETTLE: Duration = Duration::from_secs(30);

/// How often the nodes' views are polled (each poll opens one connection per
/// node and asks `CLUSTER INFO` and `CLUSTER SLOTS`).
const POLL: Duration = Duration::from_millis(50);

/// How long `MIGRATE` may wait on the target, in milliseconds.
const MIGRATE_TIMEOUT_MS: u64 = 5000;

/// Masters in every harness cluster.
const MASTERS: usize = 3;

/// One node's `CLUSTER SLOTS` as `(first slot, last slot, master port)`
/// ranges, sorted; `None` when the node cannot be asked.
type SlotMap = Vec<(u16, u16, u16)>;

/// One node's `CLUSTER SLOTS` with the replicas too: `(first slot, last
/// slot, master port, replica ports sorted)`, sorted.
type FullSlotMap = Vec<(u16, u16, u16, Vec<u16>)>;

/// The master port that owns `slot` in `map`.
fn owner_in(map: &SlotMap, slot: u16) -> Option<u16> {
    map.iter()
        .find(|(first, last, _)| (*first..=*last).contains(&slot))
        .map(|(_, _, port)| *port)
}

/// `CLUSTER SLOTS` of the node on `port`, or `None` when it cannot be asked
/// or answers something unexpected.
fn slot_map(port: u16) -> Option<SlotMap> {
    Some(
        full_slot_map(port)?
            .into_iter()
            .map(|(first, last, master, _)| (first, last, master))
            .collect(),
    )
}

/// [`slot_map`] with each range's replicas (`CLUSTER SLOTS` lists the
/// replicas not marked failed).
fn full_slot_map(port: u16) -> Option<FullSlotMap> {
    let reply: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(&mut try_conn(port)?)
        .ok()?;
    let node_port = |node: &redis::Value| -> Option<u16> {
        // [ip, port, id, …]
        let redis::Value::Array(node) = node else {
            return None;
        };
        redis::from_redis_value_ref(node.get(1)?).ok()
    };
    let mut map = reply
        .iter()
        .map(|range| {
            // [first, last, master, replicas…]
            let first = redis::from_redis_value_ref(range.first()?).ok()?;
            let last = redis::from_redis_value_ref(range.get(1)?).ok()?;
            let master = node_port(range.get(2)?)?;
            let mut replicas = range
                .get(3..)
                .unwrap_or_default()
                .iter()
                .map(node_port)
                .collect::<Option<Vec<u16>>>()?;
            replicas.sort_unstable();
            Some((first, last, master, replicas))
        })
        .collect::<Option<FullSlotMap>>()?;
    map.sort_unstable();
    Some(map)
}

/// `INFO replication` of the node on `port`: its `role` (`master` or
/// `slave`) and, for a replica, its master's port and whether the link to it
/// is up (`master_link_status:up`).
fn replication(port: u16) -> Option<(String, Option<u16>, bool)> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut try_conn(port)?)
        .ok()?;
    let role = info_field(&info, "role")?;
    let master_port = info_field(&info, "master_port").and_then(|p| p.parse().ok());
    let link_up = info_field(&info, "master_link_status").as_deref() == Some("up");
    Some((role, master_port, link_up))
}

/// `CLUSTER INFO`'s `cluster_state` on the node on `port`.
fn cluster_state(port: u16) -> Option<String> {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut try_conn(port)?)
        .ok()?;
    info_field(&info, "cluster_state")
}

/// Three `redis-server --cluster-enabled yes` masters
/// (`cluster-node-timeout 5000`), their 16384 slots spread evenly by
/// `redis-cli --cluster create`, without replicas ([`RedisCluster::start`])
/// or with one each ([`RedisCluster::start_with_replicas`]: six nodes, which
/// node replicates which master is `redis-cli`'s choice, see
/// [`RedisCluster::replica_of`]). Every node has its own `nodes.conf` in its
/// temp dir and its own free `--cluster-port` (the bus port), so the default
/// port + 10000 cannot clash with anything.
///
/// Measured here (2 cores, redis 7.0.15): [`RedisCluster::start`] takes
/// about 2.1 s: the nodes start in ~0.1 s, `redis-cli` takes ~1 s (it sleeps
/// a second while the nodes meet), and the nodes say `cluster_state:ok` only
/// 2 s after they started (Redis keeps a fresh master out of `ok` that
/// long). [`RedisCluster::migrate_slot`] of a slot with a few keys takes
/// about 10 ms. [`RedisCluster::start_with_replicas`] takes about 12 s:
/// `redis-cli` takes ~3 s, the replicas sync at once, but a node lists a
/// replica in its `CLUSTER SLOTS` only once a ping from that replica has told
/// it a replication offset, which takes every node up to ~10 s more.
/// [`RedisCluster::failover`] takes 50-110 ms.
pub struct RedisCluster {
    /// Masters and replicas, in `redis-cli --cluster create`'s order.
    nodes: Vec<RedisServer>,
    /// Replicas per master at creation (0 or 1).
    replicas: usize,
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
        Self::create(0, None)
    }

    /// Like [`RedisCluster::start`], with node 0 (a master) running the
    /// server binary `first` and the others the suite's: a cluster in the
    /// middle of an upgrade.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_mixed(first: &str) -> RedisCluster {
        Self::create(0, Some(first))
    }

    /// Like [`RedisCluster::start`] with one replica per master: six nodes,
    /// `--cluster-replicas 1`, settled when every node agrees on the slot
    /// map (masters and replicas) and every replica's `master_link_status`
    /// is `up`.
    ///
    /// # Panics
    /// As [`RedisCluster::start`].
    pub fn start_with_replicas() -> RedisCluster {
        Self::create(1, None)
    }

    fn create(replicas: usize, first: Option<&str>) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..MASTERS * (1 + replicas))
            .map(|i| {
                let bus_port = free_port().to_string();
                let start = |args: &[&str]| match first.filter(|_| i == 0) {
                    Some(binary) => RedisServer::start_binary(binary, args),
                    None => RedisServer::start_with(args),
                };
                start(&[
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
            replicas,
            create_output: String::new(),
        };
        let mut cmd = Command::new(redis_cli_bin());
        cmd.args(["--cluster", "create"])
            .args(cluster.seeds())
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
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
            "the cluster settled (cluster_state:ok, all nodes agree, replicas linked)",
            || cluster.settled(),
        );
        cluster
    }

    /// Kills node `node` (SIGKILL). The other nodes mark it failed after
    /// `cluster-node-timeout` (5 s); with [`RedisCluster::start_with_replicas`]
    /// its replica is then promoted.
    pub fn kill_node(&mut self, node: usize) {
        self.nodes[node].stop();
    }

    /// Every node: the three masters, or with
    /// [`RedisCluster::start_with_replicas`] the six nodes, masters and
    /// replicas (which is which changes with a failover).
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
    /// says so. A replica never claims a slot (its `CLUSTER SLOTS` names its
    /// master), so this holds with replicas too; after
    /// [`RedisCluster::failover`] returns, the owner is the promoted replica.
    ///
    /// # Panics
    /// When not exactly one node claims the slot (e.g. its owner is stopped,
    /// or in the instant of a failover where the promoted replica claims it
    /// and the old master has not heard yet).
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

    /// The index in [`RedisCluster::nodes`] of the replica of node `master`
    /// now (from every node's `INFO replication`: `role:slave` and
    /// `master_port`).
    ///
    /// # Panics
    /// When not exactly one node replicates `master` (a cluster from
    /// [`RedisCluster::start`] has none).
    pub fn replica_of(&self, master: usize) -> usize {
        let port = self.nodes[master].port;
        let replicas: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| {
                i != master
                    && replication(self.nodes[i].port)
                        .is_some_and(|(role, of, _)| role == "slave" && of == Some(port))
            })
            .collect();
        match replicas[..] {
            [replica] => replica,
            _ => panic!(
                "{} nodes ({replicas:?}) replicate node {master} (port {port}):\n{}",
                replicas.len(),
                self.views()
            ),
        }
    }

    /// The index in [`RedisCluster::nodes`] of the master that node
    /// `replica` replicates now (its `INFO replication` `master_port`).
    ///
    /// # Panics
    /// When the node is not a replica of one of the nodes.
    pub fn master_of(&self, replica: usize) -> usize {
        let port = match replication(self.nodes[replica].port) {
            Some((role, Some(port), _)) if role == "slave" => port,
            other => panic!(
                "node {replica} is not a replica ({other:?}):\n{}",
                self.views()
            ),
        };
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("node {replica} replicates port {port}, not a node"))
    }

    /// The graceful, manual failover of node `replica`'s master to it:
    /// `CLUSTER FAILOVER` (no `FORCE`) sent to the replica, which has its
    /// master stop writes, catches up with its replication offset (so no
    /// acknowledged write is lost), wins the election and takes the
    /// master's slots; the old master becomes its replica. Returns once
    /// every node's `CLUSTER SLOTS` names `replica` master of every range
    /// the old master owned, with how long that took from sending the
    /// command.
    ///
    /// The old master's link to its new master may still be coming up then:
    /// poll [`RedisCluster::settled`] to wait for that too.
    ///
    /// # Panics
    /// When the node is not a replica with its link up, refuses the command,
    /// or the nodes do not agree within 30 s.
    pub fn failover(&self, replica: usize) -> Duration {
        let master = self.master_of(replica);
        let (old_port, new_port) = (self.nodes[master].port, self.nodes[replica].port);
        let ranges: Vec<(u16, u16)> = slot_map(new_port)
            .unwrap_or_else(|| panic!("node {replica} does not answer CLUSTER SLOTS"))
            .into_iter()
            .filter(|(_, _, owner)| *owner == old_port)
            .map(|(first, last, _)| (first, last))
            .collect();
        assert!(
            !ranges.is_empty(),
            "node {master} (port {old_port}) owns no slots:\n{}",
            self.views()
        );
        assert!(
            self.nodes[replica].master_link_up(),
            "node {replica}'s link to node {master} is down:\n{}",
            self.views()
        );
        let t0 = Instant::now();
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut self.nodes[replica].conn())
            .unwrap_or_else(|e| panic!("CLUSTER FAILOVER on node {replica}: {e}"));
        self.wait_until(
            &format!(
                "every node names node {replica} (port {new_port}) master of {ranges:?}, \
                 node {master}'s (port {old_port}) until the failover"
            ),
            || {
                self.nodes.iter().all(|n| {
                    slot_map(n.port).is_some_and(|m| {
                        ranges
                            .iter()
                            .all(|(first, last)| m.contains(&(*first, *last, new_port)))
                    })
                })
            },
        );
        t0.elapsed()
    }

    /// Whether node `node` says it is a master (`INFO replication`).
    fn is_master(&self, node: usize) -> bool {
        replication(self.nodes[node].port).is_some_and(|(role, _, _)| role == "master")
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

    /// How many calls of `cmd` (lower case) failed on all nodes together
    /// (`failed_calls`: `BUSYGROUP` for `xgroup|create`, say).
    pub fn command_failed_calls_total(&self, cmd: &str) -> u64 {
        self.nodes.iter().map(|n| n.command_failed_calls(cmd)).sum()
    }

    /// Whether the cluster is in a steady state: every node says
    /// `cluster_state:ok`, and every node's `CLUSTER SLOTS` covers all 16384
    /// slots with three of the nodes as masters, each with as many replicas
    /// as it was created with, the same on all; and every replica's link to
    /// its master is up (`master_link_status:up`).
    pub fn settled(&self) -> bool {
        let ports: BTreeSet<u16> = self.nodes.iter().map(|n| n.port).collect();
        let mut first: Option<FullSlotMap> = None;
        let agreed = self.nodes.iter().all(|n| {
            let Some(map) = full_slot_map(n.port) else {
                return false;
            };
            let covered: u32 = map.iter().map(|(a, b, _, _)| u32::from(b - a) + 1).sum();
            let masters: BTreeSet<u16> = map.iter().map(|(_, _, p, _)| *p).collect();
            let replicas_ok = map.iter().all(|(_, _, _, r)| {
                r.len() == self.replicas && r.iter().all(|p| ports.contains(p))
            });
            let same = match &first {
                None => {
                    first = Some(map.clone());
                    true
                }
                Some(f) => *f == map,
            };
            cluster_state(n.port).as_deref() == Some("ok")
                && covered == u32::from(SLOTS)
                && masters.len() == MASTERS
                && masters.is_subset(&ports)
                && replicas_ok
                && same
        });
        let masters: BTreeSet<u16> = first.iter().flatten().map(|(_, _, p, _)| *p).collect();
        agreed
            && self
                .nodes
                .iter()
                .filter(|n| !masters.contains(&n.port))
                .all(|n| {
                    replication(n.port).is_some_and(|(role, of, up)| {
                        role == "slave" && of.is_some_and(|p| masters.contains(&p)) && up
                    })
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
    /// target, then the source, then the other masters (replicas refuse
    /// `SETSLOT` and learn from their masters); then waits (up to 30 s)
    /// until every node's `CLUSTER SLOTS` gives the slot to the target.
    ///
    /// # Panics
    /// When a node refuses (the source does while it still has keys of the
    /// slot) or the nodes do not agree in time.
    pub fn finish(&self, cluster: &RedisCluster) {
        let others = (0..cluster.nodes.len())
            .filter(|&i| i != self.from && i != self.to && cluster.is_master(i));
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

/// A Redis Cluster of three masters that speaks nothing but TLS, clients and
/// cluster bus alike: every node runs with `--port 0 --tls-port <free>
/// --tls-cluster yes --tls-auth-clients no` (`yes` for
/// [`TlsCluster::start_mutual`]) and its own free `--cluster-port`, with one
/// CA, server certificate (SAN `IP:127.0.0.1`) and client certificate, made
/// by [`make_certs`](super::tls::make_certs), shared by all. A node presents
/// the client certificate on its outgoing bus connections
/// (`--tls-client-cert-file`): the accepting node always verifies its peer,
/// and the server certificate is `serverAuth` only. Created with `redis-cli
/// --tls --cacert <ca> --cluster create … --cluster-replicas 0
/// --cluster-yes` (given 30 s: it waits for the nodes to meet without a
/// deadline of its own); all killed on drop, each node's log printed when
/// the test panics.
///
/// The harness itself asks the nodes over TLS with redis-rs's synchronous
/// client (`rediss://` and the CA).
///
/// Measured here (2 cores, redis 7.0.15, other builds running):
/// [`TlsCluster::start`] takes 2.3-2.6 s, like [`RedisCluster::start`]
/// (`redis-cli` sleeps a second while the nodes meet, and a fresh master
/// says `cluster_state:ok` only 2 s after it started); up to ~6.5 s while
/// five other test clusters start at once.
pub struct TlsCluster {
    /// `ca.crt`, `server.{crt,key}` and `client.{crt,key}` (the nodes'
    /// own for their outgoing bus connections, and a client's for
    /// [`TlsCluster::start_mutual`]).
    certs: tempfile::TempDir,
    /// Whether clients must present a certificate.
    mutual: bool,
    /// The three masters; each process's port is its TLS port.
    nodes: Vec<super::process::Process>,
    /// What `redis-cli --cluster create` printed, for failure messages.
    create_output: String,
}

impl TlsCluster {
    /// Makes the certificates, starts the three nodes (each up once it
    /// answers `PING` over TLS), creates the cluster and waits (up to 30 s)
    /// until it has [settled](TlsCluster::settled).
    ///
    /// # Panics
    /// When `openssl`, a node or `redis-cli` fails, or the cluster does not
    /// settle in time; the message has `redis-cli`'s output and every node's
    /// view of the cluster (the nodes' logs follow).
    pub fn start() -> TlsCluster {
        Self::start_inner(false)
    }

    /// Like [`TlsCluster::start`] but for mutual TLS: clients must present a
    /// certificate signed by the CA (`--tls-auth-clients yes`); see
    /// [`TlsCluster::client_cert_pem`].
    pub fn start_mutual() -> TlsCluster {
        Self::start_inner(true)
    }

    fn start_inner(mutual: bool) -> TlsCluster {
        let certs = tempfile::tempdir().expect("temp dir");
        super::tls::make_certs(certs.path());
        let mut cluster = TlsCluster {
            certs,
            mutual,
            nodes: Vec::with_capacity(MASTERS),
            create_output: String::new(),
        };
        for _ in 0..MASTERS {
            let mut node = super::process::Process::new("TLS cluster redis-server");
            let d = cluster.certs.path();
            let mut cmd = Command::new(super::redis_server_bin());
            cmd.args(["--port", "0"])
                .args(["--tls-port", &node.port.to_string()])
                .args(["--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .arg("--tls-cert-file")
                .arg(d.join("server.crt"))
                .arg("--tls-key-file")
                .arg(d.join("server.key"))
                .arg("--tls-ca-cert-file")
                .arg(d.join("ca.crt"))
                // Outgoing bus connections present a certificate (the
                // accepting node always verifies a peer's), and the server
                // one is `serverAuth` only.
                .arg("--tls-client-cert-file")
                .arg(d.join("client.crt"))
                .arg("--tls-client-key-file")
                .arg(d.join("client.key"))
                .args(["--tls-auth-clients", if mutual { "yes" } else { "no" }])
                .args(["--tls-cluster", "yes"])
                .args(["--cluster-enabled", "yes"])
                // Relative to `--dir`, the node's own temp dir.
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-port", &super::free_port().to_string()])
                .args(["--cluster-node-timeout", "5000"])
                .arg("--dir")
                .arg(node.dir())
                .arg("--logfile")
                .arg(node.log_path());
            node.spawn(cmd, |port| {
                cluster.try_conn(port).is_some_and(|mut c| {
                    redis::cmd("PING")
                        .query::<String>(&mut c)
                        .is_ok_and(|p| p == "PONG")
                })
            });
            cluster.nodes.push(node);
        }
        // `redis-cli` waits for the nodes to meet without a deadline (they
        // never do when their bus handshake fails): it gets one here, and
        // writes to a file so a full pipe cannot stall it.
        let out_path = cluster.certs.path().join("redis-cli.out");
        let out_file = std::fs::File::create(&out_path).expect("create redis-cli.out");
        let mut cmd = Command::new(redis_cli_bin());
        cmd.arg("--tls").arg("--cacert").arg(cluster.ca_path());
        if mutual {
            cmd.arg("--cert")
                .arg(cluster.certs.path().join("client.crt"))
                .arg("--key")
                .arg(cluster.certs.path().join("client.key"));
        }
        cmd.args(["--cluster", "create"])
            .args(cluster.seeds())
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .stdout(out_file.try_clone().expect("clone redis-cli.out"))
            .stderr(out_file);
        let mut child = cmd.spawn().unwrap_or_else(|e| {
            panic!("could not start redis-cli ({cmd:?}): {e} (set RILLKIT_REDIS_CLI)")
        });
        let deadline = Instant::now() + SETTLE;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait for redis-cli") {
                break Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(POLL);
        };
        cluster.create_output = std::fs::read_to_string(&out_path).unwrap_or_default();
        match status {
            Some(s) if s.success() => {}
            Some(s) => panic!("{cmd:?} failed ({s}):\n{}", cluster.diagnostics()),
            None => panic!(
                "{cmd:?} still ran after {SETTLE:?} (killed):\n{}",
                cluster.diagnostics()
            ),
        }
        let deadline = Instant::now() + SETTLE;
        while !cluster.settled() {
            assert!(
                Instant::now() < deadline,
                "timed out after {SETTLE:?} waiting for the TLS cluster to settle \
                 (cluster_state:ok, all nodes agree)\n{}",
                cluster.diagnostics()
            );
            std::thread::sleep(POLL);
        }
        cluster
    }

    /// The nodes' addresses, `127.0.0.1:<TLS port>`, to seed a cluster
    /// client.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect()
    }

    /// The nodes' TLS ports (nothing listens in the clear).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// Path of the CA certificate (PEM) that signed every node's
    /// certificate.
    pub fn ca_path(&self) -> std::path::PathBuf {
        self.certs.path().join("ca.crt")
    }

    /// The CA certificate, PEM.
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.ca_path()).expect("read ca.crt")
    }

    /// Whether clients must present a certificate.
    pub fn is_mutual(&self) -> bool {
        self.mutual
    }

    /// The client certificate, PEM, signed by the CA.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        std::fs::read(self.certs.path().join("client.crt")).expect("read client.crt")
    }

    /// The client key, PKCS#8 PEM.
    pub fn client_key_pem(&self) -> Vec<u8> {
        std::fs::read(self.certs.path().join("client.key")).expect("read client.key")
    }

    /// A TLS connection (verified with the CA; with the client certificate
    /// when [mutual](TlsCluster::start_mutual)) to 127.0.0.1:`port`, or
    /// `None` while nothing accepts one.
    fn try_conn(&self, port: u16) -> Option<redis::Connection> {
        let certs = redis::TlsCertificates {
            client_tls: self.mutual.then(|| redis::ClientTlsConfig {
                client_cert: self.client_cert_pem(),
                client_key: self.client_key_pem(),
            }),
            root_cert: Some(self.ca_pem()),
        };
        redis::Client::build_with_tls(format!("rediss://127.0.0.1:{port}"), certs)
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()
    }

    /// A synchronous TLS connection to node `node`, to check what is in
    /// Redis without a cluster client.
    ///
    /// # Panics
    /// When it cannot connect.
    pub fn conn(&self, node: usize) -> redis::Connection {
        let port = self.nodes[node].port;
        self.try_conn(port)
            .unwrap_or_else(|| panic!("no TLS connection to node {node} (port {port})"))
    }

    /// `CLUSTER SLOTS` of the node on `port` as in [`slot_map`], and its
    /// `cluster_state`; `None` when it cannot be asked.
    fn view(&self, port: u16) -> Option<(SlotMap, String)> {
        let mut c = self.try_conn(port)?;
        let reply: Vec<Vec<redis::Value>> =
            redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).ok()?;
        let mut map = reply
            .iter()
            .map(|range| {
                // [first, last, [ip, port, id, …], replicas…]
                let first = redis::from_redis_value_ref(range.first()?).ok()?;
                let last = redis::from_redis_value_ref(range.get(1)?).ok()?;
                let redis::Value::Array(master) = range.get(2)? else {
                    return None;
                };
                Some((
                    first,
                    last,
                    redis::from_redis_value_ref(master.get(1)?).ok()?,
                ))
            })
            .collect::<Option<SlotMap>>()?;
        map.sort_unstable();
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).ok()?;
        Some((map, super::info_field(&info, "cluster_state")?))
    }

    /// The index in [`TlsCluster::ports`] of the master that owns `key`'s
    /// slot, as node 0 sees it (`CLUSTER KEYSLOT`, `CLUSTER SLOTS`).
    ///
    /// # Panics
    /// When node 0 does not answer or no node owns the slot.
    pub fn owner_of_key(&self, key: &str) -> usize {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.conn(0))
            .expect("CLUSTER KEYSLOT");
        let (map, _) = self
            .view(self.nodes[0].port)
            .expect("node 0 answers CLUSTER SLOTS");
        let port = owner_in(&map, slot).unwrap_or_else(|| panic!("slot {slot} has no owner"));
        self.nodes
            .iter()
            .position(|n| n.port == port)
            .unwrap_or_else(|| panic!("slot {slot} is on port {port}, not a node"))
    }

    /// A synchronous TLS connection to the master that owns `key`'s slot.
    pub fn conn_for_key(&self, key: &str) -> redis::Connection {
        self.conn(self.owner_of_key(key))
    }

    /// Whether every node says `cluster_state:ok` and the same `CLUSTER
    /// SLOTS`, covering all 16384 slots with the three nodes as masters.
    pub fn settled(&self) -> bool {
        let ports: BTreeSet<u16> = self.ports().into_iter().collect();
        let views: Option<Vec<(SlotMap, String)>> =
            self.nodes.iter().map(|n| self.view(n.port)).collect();
        let Some(views) = views else {
            return false;
        };
        let (first, _) = &views[0];
        let covered: u32 = first.iter().map(|(a, b, _)| u32::from(b - a) + 1).sum();
        let masters: BTreeSet<u16> = first.iter().map(|(_, _, p)| *p).collect();
        covered == u32::from(SLOTS)
            && masters == ports
            && views.iter().all(|(m, state)| m == first && state == "ok")
    }

    /// `redis-cli --cluster create`'s output and every node's
    /// `cluster_state` and `CLUSTER NODES`, for a failing test's message
    /// (the nodes' logs are printed when they are dropped in a panic).
    pub fn diagnostics(&self) -> String {
        let views: String = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut c = self.try_conn(n.port);
                let nodes: Option<String> = c
                    .as_mut()
                    .and_then(|c| redis::cmd("CLUSTER").arg("NODES").query(c).ok());
                let state = self.view(n.port).map(|(_, s)| s);
                format!(
                    "---- node {i} (TLS port {}): cluster_state {} ----\n{}",
                    n.port,
                    state.as_deref().unwrap_or("?"),
                    nodes.as_deref().unwrap_or("(CLUSTER NODES failed)\n"),
                )
            })
            .collect();
        format!(
            "---- redis-cli --tls --cluster create ----\n{}{views}",
            self.create_output
        )
    }
}
