//! A stream ordered by key keeps each key's order whenever a partition
//! changes hands, one test per cause (issue 27): the owner SIGKILLed while
//! it runs a key's entry with more fetched (another member takes over); the
//! killed worker restarted under its name (it is the new owner); a share-out
//! to a joining member, with no crash; a member cut off from Redis (its
//! traffic held by a proxy past the lease TTL, then delivered); Redis
//! restarted from its AOF while the workers run; a poison entry under
//! `skip` and under `fail_rest`, with its owner killed.
//!
//! Each runs `worker` processes (`RILLKIT_PRINT_RUNS`: a line when a run
//! starts and when it ends, with ms since the epoch), more than one key per
//! partition and concurrency 4, and checks with `support::order`: every
//! key's first runs in publish order; no re-run of an entry after a newer
//! entry of its key started; no two runs of one key at once, across
//! processes (a killed worker's runs end at the kill); no re-run without a
//! kill or a fault (none at all for the share-out); nothing pending and
//! nothing dead-lettered at the end but the poison entry (and, with
//! `fail_rest`, its key's later ones); exit 0 on SIGTERM for the workers
//! still running. The cut-off member also starts nothing after its lease
//! lapsed until it owns the partition again, logs a WARN saying `lease
//! lapsed`, and its partitions run on the other member within the lease TTL
//! plus 5 s.
//!
//! The tests of this file run one at a time (a lock): each runs two or
//! three processes with a lease of one to three seconds.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rillkit::partition_of;
use support::order::{self, Run};
use support::proxy::Proxy;
use support::{RedisServer, Worker, eventually_blocking};

const STREAM: &str = "tasks";
const GROUP: &str = "workers";
/// Every wait of a test, at most.
const WAIT: Duration = Duration::from_secs(40);

/// One test of this file at a time.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64
}

/// An entry published: what its `id` stands for.
#[derive(Clone, Debug)]
struct Job {
    key: String,
    seq: u64,
    partition: u16,
}

/// `per` keys of each of `partitions` partitions, partition by partition.
fn keys(partitions: u16, per: usize) -> Vec<String> {
    let mut by: Vec<Vec<String>> = vec![Vec::new(); usize::from(partitions)];
    for n in 0.. {
        if by.iter().all(|k| k.len() == per) {
            break;
        }
        let k = format!("key-{n}");
        let p = usize::from(partition_of(k.as_bytes(), partitions));
        if by[p].len() < per {
            by[p].push(k);
        }
    }
    by.concat()
}

/// Why the earlier run of an entry run again may have lost its ack.
#[derive(Clone, Copy, Debug)]
enum Cause {
    /// Its worker was SIGKILLed (at that ms).
    Kill { who: usize, at: u64 },
    /// Worker `who` (any, for `None`) was cut off from Redis, or Redis was
    /// down, from `from` to `to` (ms); a run that ended within `slack` ms
    /// before it, or started within `slack` ms after it, may have lost its
    /// ack to it.
    Fault {
        who: Option<usize>,
        from: u64,
        to: u64,
        slack: u64,
    },
}

impl Cause {
    /// Whether `earlier` (a run of an entry that ran again) may have lost
    /// its ack to this.
    fn explains(&self, earlier: &Run) -> bool {
        match *self {
            Cause::Kill { who, at } => earlier.who == who && earlier.start <= at,
            Cause::Fault {
                who,
                from,
                to,
                slack,
            } => {
                who.is_none_or(|w| w == earlier.who)
                    && earlier.start <= to + slack
                    && earlier.end.is_none_or(|e| e + slack >= from)
            }
        }
    }
}

/// A Redis server, the workers of one test, and what they were given.
struct Scene {
    redis: RedisServer,
    partitions: u16,
    keys: Vec<String>,
    /// Every entry published, by job id.
    jobs: BTreeMap<u64, Job>,
    /// The next seq of each key.
    next: HashMap<String, u64>,
    env: Vec<(String, String)>,
    workers: Vec<Worker>,
    names: Vec<String>,
    /// Kills and faults, to explain re-runs.
    causes: Vec<Cause>,
    /// The workers killed, with when.
    killed: HashMap<usize, u64>,
    began: std::time::Instant,
}

impl Scene {
    /// `per_partition` keys in each of `partitions` partitions, workers with
    /// concurrency 4, reads of up to 20 entries, a lease of `lease_ms`, and
    /// `extra` variables.
    fn new(
        redis: RedisServer,
        partitions: u16,
        per_partition: usize,
        lease_ms: u64,
        extra: &[(&str, &str)],
    ) -> Scene {
        let mut env: Vec<(String, String)> = [
            ("RILLKIT_ORDER_BY", "key".to_owned()),
            ("RILLKIT_PARTITIONS", partitions.to_string()),
            ("RILLKIT_CONCURRENCY", "4".to_owned()),
            ("RILLKIT_COUNT", "20".to_owned()),
            ("RILLKIT_BLOCK_MS", "200".to_owned()),
            // Short enough that, were a dead owner's entries left to the
            // reclaimer, they would come back within the test.
            ("RILLKIT_CLAIM_IDLE_MS", "5000".to_owned()),
            ("RILLKIT_SHUTDOWN_TIMEOUT_MS", "10000".to_owned()),
            ("RILLKIT_LEASE_TTL_MS", lease_ms.to_string()),
            ("RILLKIT_PRINT_RUNS", "1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        env.extend(
            extra
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        Scene {
            redis,
            partitions,
            keys: keys(partitions, per_partition),
            jobs: BTreeMap::new(),
            next: HashMap::new(),
            env,
            workers: Vec::new(),
            names: Vec::new(),
            causes: Vec::new(),
            killed: HashMap::new(),
            began: std::time::Instant::now(),
        }
    }

    /// Prints how far the test is, for a failure's output.
    fn note(&self, what: &str) {
        eprintln!("[{:>6} ms] {what}", self.began.elapsed().as_millis());
    }

    /// Starts a worker named `name` against the server (or `url`), waits
    /// until its consumer started; answers its index.
    fn spawn_at(&mut self, name: &str, url: &str) -> usize {
        let mut env: Vec<(&str, &str)> = support::worker_env(name, &[]);
        env.retain(|(k, _)| !self.env.iter().any(|(e, _)| e == k));
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        self.workers.push(Worker::spawn(url, &env));
        self.names.push(name.to_owned());
        self.note(&format!("worker {name} started"));
        self.workers.len() - 1
    }

    fn spawn(&mut self, name: &str) -> usize {
        let url = self.redis.url();
        self.spawn_at(name, &url)
    }

    /// Publishes `n` more entries of every key (seq after seq, the keys
    /// side by side), each running `sleep_ms`, those `fail` names failing
    /// every run: one `MULTI`, so a blocked read sees them all at once.
    fn publish(&mut self, n: u64, sleep_ms: u64, fail: impl Fn(&str, u64) -> bool) {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for _ in 0..n {
            for key in &self.keys {
                let seq = self.next.entry(key.clone()).or_insert(1);
                let id = self.jobs.len() as u64 + 1;
                let partition = partition_of(key.as_bytes(), self.partitions);
                let fails = fail(key, *seq);
                let json = format!(
                    r#"{{"id":{id},"key":"{key}","seq":{seq},"sleep_ms":{sleep_ms},"fail":{fails}}}"#
                );
                pipe.cmd("XADD")
                    .arg(format!("{STREAM}:p{partition}"))
                    .arg("*")
                    .arg("data")
                    .arg(json)
                    .ignore();
                self.jobs.insert(
                    id,
                    Job {
                        key: key.clone(),
                        seq: *seq,
                        partition,
                    },
                );
                *seq += 1;
            }
        }
        pipe.query::<()>(&mut self.redis.conn()).expect("publish");
        self.note(&format!("published {n} entries of each key"));
    }

    /// The id of `key`'s entry `seq`.
    fn id_of(&self, key: &str, seq: u64) -> u64 {
        *self
            .jobs
            .iter()
            .find(|(_, j)| j.key == key && j.seq == seq)
            .expect("published")
            .0
    }

    /// The keys of partition `p`.
    fn keys_of(&self, p: u16) -> Vec<String> {
        self.keys
            .iter()
            .filter(|k| partition_of(k.as_bytes(), self.partitions) == p)
            .cloned()
            .collect()
    }

    /// Who holds partition `p`'s lease (the consumer name in its token).
    fn owner(&self, conn: &mut redis::Connection, p: u16) -> Option<String> {
        let v: Option<String> = redis::cmd("GET")
            .arg(lease_key(p))
            .query(conn)
            .ok()
            .flatten();
        Some(v?.split(' ').next()?.to_owned())
    }

    /// Waits until each partition's lease is held by the name given.
    fn wait_owners(&self, want: &[(u16, &str)]) {
        let mut c = self.redis.conn();
        eventually_blocking(&format!("partition owners {want:?}"), WAIT, || {
            want.iter()
                .all(|(p, name)| self.owner(&mut c, *p).as_deref() == Some(*name))
        });
        self.note(&format!("owners {want:?}"));
    }

    /// The runs `who` printed so far.
    fn worker_runs(&self, who: usize) -> Vec<order::WorkerRun> {
        order::worker_runs(&self.workers[who].lines())
    }

    /// Waits until worker `who` (consumer `name`, owner of p0) has started
    /// 3 runs, runs one now, and holds more than 4 entries beyond those it
    /// runs (fetched, not started): the moment a kill costs the most.
    fn wait_running_with_more_fetched(&self, who: usize, name: &str, c: &mut redis::Connection) {
        eventually_blocking("a running with more fetched", WAIT, || {
            let (started, running) = self.started_running(who);
            let held = support::consumers(c, &format!("{STREAM}:p0"), GROUP)
                .into_iter()
                .find(|(n, _)| n == name)
                .map_or(0, |(_, n)| n);
            started >= 3 && running >= 1 && held > running as u64 + 4
        });
    }

    /// Runs `who` started so far, and how many of them have not ended.
    fn started_running(&self, who: usize) -> (usize, usize) {
        let runs = self.worker_runs(who);
        let open = runs.iter().filter(|r| r.end.is_none()).count();
        (runs.len(), open)
    }

    /// Every run of every worker, a killed one's unended runs ending at the
    /// kill.
    fn runs(&self) -> Vec<Run> {
        let mut runs = Vec::new();
        for who in 0..self.workers.len() {
            for r in self.worker_runs(who) {
                let Some(job) = self.jobs.get(&r.id) else {
                    continue;
                };
                runs.push(Run {
                    key: job.key.clone(),
                    seq: job.seq,
                    start: r.start,
                    end: r.end.map(|(at, _)| at),
                    who,
                });
            }
        }
        for (who, at) in &self.killed {
            order::end_killed(&mut runs, *who, *at);
        }
        runs
    }

    /// The ids some run ended `ok` for.
    fn done(&self) -> HashSet<u64> {
        (0..self.workers.len())
            .flat_map(|w| self.worker_runs(w))
            .filter(|r| r.end.as_ref().is_some_and(|(_, how)| how == "ok"))
            .map(|r| r.id)
            .collect()
    }

    /// SIGKILLs `who` and waits for it to be gone.
    fn kill(&mut self, who: usize) {
        self.workers[who].signal("KILL");
        let at = now_ms();
        let _ = self.workers[who].wait_exit(Duration::from_secs(10));
        self.killed.insert(who, at);
        self.causes.push(Cause::Kill { who, at });
        self.note(&format!("worker {} killed", self.names[who]));
    }

    /// The job ids in the partitions' dead-letter streams.
    fn dead_letters(&self) -> BTreeSet<u64> {
        let mut c = self.redis.conn();
        let mut ids = BTreeSet::new();
        for p in 0..self.partitions {
            let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
                .arg(format!("{STREAM}:p{p}-dlq"))
                .arg("-")
                .arg("+")
                .query(&mut c)
                .expect("XRANGE");
            for e in reply.ids {
                let data: String = e.get("data").expect("a dead letter's data");
                let v: serde_json::Value = serde_json::from_str(&data).expect("JSON");
                ids.insert(v["id"].as_u64().expect("an id"));
            }
        }
        ids
    }

    /// Waits until every entry but `dead` ran to success, no partition has
    /// anything pending, and the dead-letter streams hold exactly `dead`.
    fn settle(&self, dead: &BTreeSet<u64>) {
        let want: BTreeSet<u64> = self
            .jobs
            .keys()
            .copied()
            .filter(|id| !dead.contains(id))
            .collect();
        let mut c = self.redis.conn();
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            let done = self.done();
            let missing: Vec<u64> = want.iter().copied().filter(|i| !done.contains(i)).collect();
            let pending: Vec<usize> = (0..self.partitions)
                .map(|p| support::pending_count(&mut c, &format!("{STREAM}:p{p}"), GROUP))
                .collect();
            let dead_now = self.dead_letters();
            if missing.is_empty() && pending.iter().all(|n| *n == 0) && dead_now == *dead {
                self.note("settled");
                return;
            }
            let state = format!(
                "not run to success: {} {:?}; pending per partition: {pending:?}; dead letters: {dead_now:?} (expected {dead:?})",
                missing.len(),
                &missing[..missing.len().min(20)]
            );
            assert!(
                std::time::Instant::now() < deadline,
                "not settled within {WAIT:?}: {state}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGTERMs every worker not killed; each exits 0.
    fn stop_all(&mut self) {
        for (who, w) in self.workers.iter().enumerate() {
            if !self.killed.contains_key(&who) {
                w.signal("TERM");
            }
        }
        let mut codes = Vec::new();
        for who in 0..self.workers.len() {
            if !self.killed.contains_key(&who) {
                codes.push((
                    self.names[who].clone(),
                    self.workers[who].wait_exit(Duration::from_secs(20)),
                ));
            }
        }
        self.note("stopped");
        assert!(
            codes.iter().all(|(_, c)| *c == Some(0)),
            "exit codes on SIGTERM: {codes:?}"
        );
    }

    /// The checks every test makes; `exempt` entries (a poison entry) may
    /// run again without a cause (their retries). Prints the figures, then
    /// fails naming every broken check.
    fn check(&self, exempt: &BTreeSet<u64>) {
        let runs = self.runs();
        let out_of_order = order::out_of_order(&runs);
        let after_newer = order::reruns_after_newer(&runs);
        let overlaps = order::overlaps(&runs);
        let reruns = order::reruns(&runs);
        let exempt: HashSet<(String, u64)> = exempt
            .iter()
            .map(|id| (self.jobs[id].key.clone(), self.jobs[id].seq))
            .collect();
        let unexplained: Vec<String> = reruns
            .iter()
            .filter(|(entry, _)| !exempt.contains(entry))
            .flat_map(|(_, runs)| {
                runs.iter()
                    .enumerate()
                    .skip(1)
                    .filter(|(i, _)| {
                        !runs[..*i]
                            .iter()
                            .any(|e| self.causes.iter().any(|c| c.explains(e)))
                    })
                    .map(|(_, r)| format!("{r} (runs: {})", list(runs)))
                    .collect::<Vec<_>>()
            })
            .collect();
        let rerun_count: usize = reruns
            .iter()
            .filter(|(entry, _)| !exempt.contains(entry))
            .map(|(_, r)| r.len() - 1)
            .sum();
        eprintln!(
            "figures: {} runs of {} entries; keys out of order {}; re-runs after a newer entry {}; overlapping runs {}; re-runs {} ({} without a kill or fault)",
            runs.len(),
            self.jobs.len(),
            out_of_order.len(),
            after_newer.len(),
            overlaps.len(),
            rerun_count,
            unexplained.len()
        );
        let mut broken = Vec::new();
        for (what, v) in [
            (
                "keys whose first runs are out of publish order",
                &out_of_order,
            ),
            ("re-runs after a newer entry of the key", &after_newer),
            ("runs of one key at once", &overlaps),
            ("re-runs without a kill or fault", &unexplained),
        ] {
            if !v.is_empty() {
                broken.push(format!(
                    "{} {what}:\n  {}",
                    v.len(),
                    v[..v.len().min(12)].join("\n  ")
                ));
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }
}

fn list(runs: &[Run]) -> String {
    runs.iter()
        .map(Run::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// When a worker's log line was written (its leading RFC 3339 UTC
/// timestamp, `2026-01-02T03:04:05.678901Z`), in ms since the epoch.
fn log_ms(line: &str) -> Option<u64> {
    let ts = line.split_whitespace().next()?.strip_suffix('Z')?;
    let (date, time) = ts.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<u64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<u64>());
    let (h, min, sec) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let ms: u64 = format!("{frac:0<3}")[..3].parse().ok()?;
    // Days since 1970-01-01 of a civil date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let (era, yoe) = (y / 400, y % 400);
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(((days * 24 + h) * 60 + min) * 60_000 + sec * 1000 + ms)
}

#[test]
fn log_lines_timestamps_read_as_ms_since_the_epoch() {
    assert_eq!(log_ms("1970-01-01T00:00:00.000000Z  WARN x"), Some(0));
    assert_eq!(
        log_ms("2026-12-02T17:42:17.719053Z  INFO rillkit::x: y"),
        Some(1_796_233_337_719)
    );
    assert_eq!(log_ms("2000-03-01T00:00:01Z"), Some(951_868_801_000));
    assert_eq!(log_ms("not a log line"), None);
}

/// Partition `p`'s lease key.
fn lease_key(p: u16) -> String {
    format!("{{{STREAM}:p{p}}}:rillkit:owner:{GROUP}")
}

fn never(_: &str, _: u64) -> bool {
    false
}

#[test]
fn a_crashed_owners_partition_runs_its_pending_entries_first_on_the_member_taking_over() {
    support::init_tracing();
    let _one = one_at_a_time();
    let mut s = Scene::new(RedisServer::start(), 2, 2, 1000, &[]);
    let a = s.spawn("a");
    let b = s.spawn("b");
    s.wait_owners(&[(0, "a"), (1, "b")]);
    s.publish(10, 150, never);
    // a runs p0's two keys side by side and holds the rest of p0 fetched.
    let mut c = s.redis.conn();
    s.wait_running_with_more_fetched(a, "a", &mut c);
    s.kill(a);
    s.publish(5, 150, never);
    eventually_blocking("b took p0 over", WAIT, || {
        s.owner(&mut c, 0).as_deref() == Some("b")
    });
    s.settle(&BTreeSet::new());
    s.stop_all();
    assert!(
        s.worker_runs(b)
            .iter()
            .any(|r| s.jobs[&r.id].partition == 0),
        "b ran p0's entries"
    );
    s.check(&BTreeSet::new());
}

#[test]
fn a_crashed_owner_restarted_under_its_name_runs_its_pending_entries_first() {
    support::init_tracing();
    let _one = one_at_a_time();
    // A lease of 3 s: the restarted worker is back in the members before
    // its predecessor's membership lapses, so the partition stays its own.
    let mut s = Scene::new(RedisServer::start(), 2, 2, 3000, &[]);
    let a = s.spawn("a");
    s.spawn("b");
    s.wait_owners(&[(0, "a"), (1, "b")]);
    s.publish(10, 150, never);
    let mut c = s.redis.conn();
    s.wait_running_with_more_fetched(a, "a", &mut c);
    s.kill(a);
    let again = s.spawn("a");
    s.publish(5, 150, never);
    s.settle(&BTreeSet::new());
    assert_eq!(
        s.owner(&mut c, 0).as_deref(),
        Some("a"),
        "the restarted worker owns p0"
    );
    s.stop_all();
    assert!(
        s.worker_runs(again)
            .iter()
            .any(|r| s.jobs[&r.id].partition == 0),
        "the restarted a ran p0's entries"
    );
    s.check(&BTreeSet::new());
}

#[test]
fn a_crashed_owner_restarted_under_a_new_name_runs_its_predecessors_pending_entries_first() {
    support::init_tracing();
    let _one = one_at_a_time();
    // The worker's default consumer name has its pid in it: a restart
    // comes back under a new name. Alone in the group, it takes over every
    // partition once its predecessor's membership and leases lapsed.
    let mut s = Scene::new(RedisServer::start(), 2, 2, 1000, &[]);
    let a = s.spawn("a");
    s.wait_owners(&[(0, "a"), (1, "a")]);
    s.publish(10, 150, never);
    eventually_blocking("a running with more fetched", WAIT, || {
        let (started, running) = s.started_running(a);
        started >= 3 && running >= 1
    });
    s.kill(a);
    let again = s.spawn("a2");
    s.publish(5, 150, never);
    s.wait_owners(&[(0, "a2"), (1, "a2")]);
    s.settle(&BTreeSet::new());
    s.stop_all();
    assert!(!s.worker_runs(again).is_empty(), "a2 ran entries");
    s.check(&BTreeSet::new());
}

#[test]
fn a_share_out_to_a_joining_member_keeps_each_keys_order_and_runs_nothing_twice() {
    support::init_tracing();
    let _one = one_at_a_time();
    let mut s = Scene::new(RedisServer::start(), 4, 2, 1000, &[]);
    let m = s.spawn("m");
    s.wait_owners(&[(0, "m"), (1, "m"), (2, "m"), (3, "m")]);
    s.publish(10, 150, never);
    eventually_blocking("m running", WAIT, || {
        let (started, running) = s.started_running(m);
        started >= 6 && running >= 2
    });
    // "a" sorts first: p0 and p2 move to it, m keeps p1 and p3.
    let a = s.spawn("a");
    s.publish(5, 150, never);
    s.wait_owners(&[(0, "a"), (1, "m"), (2, "a"), (3, "m")]);
    s.settle(&BTreeSet::new());
    s.stop_all();
    assert!(
        s.worker_runs(a)
            .iter()
            .any(|r| [0, 2].contains(&s.jobs[&r.id].partition)),
        "a ran entries of p0 and p2"
    );
    // No kill, no fault: no cause explains any re-run.
    assert!(s.causes.is_empty());
    s.check(&BTreeSet::new());
}

/// Samples of the partitions' owners: (ms, owner by partition).
type Samples = Arc<Mutex<Vec<(u64, Vec<Option<String>>)>>>;

/// The owner of each partition every ~20 ms, as (ms, owners by partition).
struct LeaseLog {
    samples: Samples,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaseLog {
    fn start(url: String, partitions: u16) -> LeaseLog {
        let samples: Samples = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut conn = redis::Client::open(url)
                .expect("url")
                .get_connection_with_timeout(Duration::from_secs(5))
                .expect("connect");
            while !st.load(Ordering::SeqCst) {
                let mut pipe = redis::pipe();
                for p in 0..partitions {
                    pipe.cmd("GET").arg(lease_key(p));
                }
                let before = now_ms();
                if let Ok(v) = pipe.query::<Vec<Option<String>>>(&mut conn) {
                    let owners = v
                        .into_iter()
                        .map(|t| Some(t?.split(' ').next()?.to_owned()))
                        .collect();
                    let at = (before + now_ms()) / 2;
                    s.lock().unwrap().push((at, owners));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        LeaseLog {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling (the samples stay).
    fn finish(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// Whether some sample within `ms` of `at` shows `name` owning `p`.
    fn owned_near(&self, name: &str, p: u16, at: u64, ms: u64) -> bool {
        self.samples.lock().unwrap().iter().any(|(t, owners)| {
            t.abs_diff(at) <= ms && owners[usize::from(p)].as_deref() == Some(name)
        })
    }
}

impl Drop for LeaseLog {
    fn drop(&mut self) {
        self.finish();
    }
}

#[test]
fn a_member_cut_off_from_redis_stops_at_its_lease_lapse_and_its_partitions_move() {
    support::init_tracing();
    let _one = one_at_a_time();
    const TTL: u64 = 2000;
    let mut s = Scene::new(RedisServer::start(), 4, 2, TTL, &[]);
    let proxy = Proxy::start(s.redis.port);
    // c (through the proxy) owns p0 and p2, d (direct) p1 and p3.
    let c = s.spawn_at("c", &proxy.url());
    let d = s.spawn("d");
    s.wait_owners(&[(0, "c"), (1, "d"), (2, "c"), (3, "d")]);
    let mut leases = LeaseLog::start(s.redis.url(), 4);
    s.publish(10, 150, never);
    eventually_blocking("c running", WAIT, || {
        let (started, running) = s.started_running(c);
        started >= 3 && running >= 1
    });
    let cut = now_ms();
    proxy.cut();
    // Newer entries of every key, while c is cut off.
    s.publish(10, 150, never);
    let cs = [0u16, 2];
    let moved = |s: &Scene| {
        s.worker_runs(d)
            .iter()
            .filter(|r| r.start >= cut && cs.contains(&s.jobs[&r.id].partition))
            .map(|r| r.start)
            .min()
    };
    eventually_blocking(
        "d runs c's partitions within the lease TTL + 5 s of the cut",
        Duration::from_millis((cut + TTL + 5000).saturating_sub(now_ms())),
        || moved(&s).is_some(),
    );
    // The cut lasts past the lease TTL by a second at least.
    eventually_blocking("the cut outlasts the lease", WAIT, || {
        now_ms() >= cut + TTL + 1000
    });
    let restore = now_ms();
    proxy.restore();
    s.causes.push(Cause::Fault {
        who: Some(c),
        from: cut,
        to: restore,
        slack: 1000,
    });
    s.settle(&BTreeSet::new());
    // c said so itself, on its own clock, while still cut off.
    let warned = |s: &Scene| {
        s.workers[c]
            .log()
            .iter()
            .filter(|l| l.contains(" WARN ") && l.contains("lease lapsed"))
            .filter_map(|l| log_ms(l))
            .collect::<Vec<u64>>()
    };
    eventually_blocking("c's WARN saying its lease lapsed", WAIT, || {
        !warned(&s).is_empty()
    });
    s.stop_all();
    leases.finish();
    // c started nothing after its lease lapsed, until it owned the
    // partition again (after the restore, in the lease log).
    let lapsed = cut + TTL;
    let late: Vec<String> = s
        .worker_runs(c)
        .iter()
        .filter(|r| r.start > lapsed)
        .filter(|r| {
            let p = s.jobs[&r.id].partition;
            r.start < restore || !leases.owned_near("c", p, r.start, 150)
        })
        .map(|r| {
            format!(
                "{} (p{}) at cut+{} ms",
                r.id,
                s.jobs[&r.id].partition,
                r.start - cut
            )
        })
        .collect();
    let warned_at: Vec<u64> = warned(&s).iter().map(|t| t.saturating_sub(cut)).collect();
    eprintln!(
        "figures: d ran c's partitions at cut+{} ms; c started {} runs after its lease lapsed without owning the partition; c's lease-lapsed WARNs at cut+{warned_at:?} ms, restored at cut+{} ms",
        moved(&s).map_or(0, |t| t - cut),
        late.len(),
        restore - cut
    );
    assert!(
        warned(&s).iter().any(|t| (cut..restore).contains(t)),
        "c logged no WARN saying its lease lapsed while cut off (cut+{warned_at:?} ms; restored at cut+{} ms)",
        restore - cut
    );
    let broken = late.len();
    s.check(&BTreeSet::new());
    assert_eq!(
        broken, 0,
        "c started entries after its lease lapsed: {late:?}"
    );
}

#[test]
fn redis_restarted_from_its_aof_while_workers_run_keeps_each_keys_order() {
    support::init_tracing();
    let _one = one_at_a_time();
    const TTL: u64 = 1000;
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut s = Scene::new(redis, 4, 2, TTL, &[]);
    let a = s.spawn("a");
    let b = s.spawn("b");
    let c = s.spawn("c");
    s.wait_owners(&[(0, "a"), (1, "b"), (2, "c"), (3, "a")]);
    s.publish(10, 150, never);
    eventually_blocking("every worker running", WAIT, || {
        [a, b, c].iter().all(|w| {
            let (started, running) = s.started_running(*w);
            started >= 3 && running >= 1
        })
    });
    let from = now_ms();
    s.redis.stop();
    s.note("Redis killed");
    // Down for three lease TTLs: every lease and membership has lapsed
    // when it is back, and the workers come back one by one, on their
    // backoff's schedule.
    eventually_blocking("Redis down past the lease TTL", WAIT, || {
        now_ms() >= from + 3 * TTL
    });
    s.redis.restart();
    let to = now_ms();
    s.note("Redis restarted from its AOF");
    s.causes.push(Cause::Fault {
        who: None,
        from,
        to,
        // Reconnecting takes up to the backoff's step (3.2 s after 3 s).
        slack: 6000,
    });
    s.publish(5, 150, never);
    s.settle(&BTreeSet::new());
    s.stop_all();
    s.check(&BTreeSet::new());
}

/// A poison entry (key `p0`'s first, seq 3, failing every run) under
/// `on_key_failure`, its owner killed between two of its runs; answers
/// the scene and the poison's id.
fn poison_with_a_kill(on_key_failure: &str) -> (Scene, u64) {
    let mut s = Scene::new(
        RedisServer::start(),
        2,
        2,
        1000,
        &[
            ("RILLKIT_ON_KEY_FAILURE", on_key_failure),
            ("RILLKIT_MAX_RETRIES", "2"),
        ],
    );
    let a = s.spawn("a");
    s.spawn("b");
    s.wait_owners(&[(0, "a"), (1, "b")]);
    let poison_key = s.keys_of(0)[0].clone();
    let pk = poison_key.clone();
    s.publish(10, 100, move |k, seq| k == pk && seq == 3);
    let poison = s.id_of(&poison_key, 3);
    eventually_blocking("the poison entry failed once on a", WAIT, || {
        s.worker_runs(a)
            .iter()
            .any(|r| r.id == poison && r.end.as_ref().is_some_and(|(_, how)| how == "failed"))
    });
    s.kill(a);
    s.publish(5, 100, never);
    (s, poison)
}

#[test]
fn a_poison_entry_under_skip_with_its_owner_killed_keeps_each_keys_order() {
    support::init_tracing();
    let _one = one_at_a_time();
    let (mut s, poison) = poison_with_a_kill("skip");
    let dead = BTreeSet::from([poison]);
    s.settle(&dead);
    s.stop_all();
    s.check(&dead);
}

#[test]
fn a_poison_entry_under_fail_rest_with_its_owner_killed_keeps_each_keys_order() {
    support::init_tracing();
    let _one = one_at_a_time();
    let (mut s, poison) = poison_with_a_kill("fail_rest");
    let key = s.jobs[&poison].key.clone();
    let dead: BTreeSet<u64> = s
        .jobs
        .iter()
        .filter(|(_, j)| j.key == key && j.seq >= 3)
        .map(|(id, _)| *id)
        .collect();
    s.settle(&dead);
    s.stop_all();
    // The key's entries after the poison never ran.
    let ran_after: Vec<u64> = s
        .runs()
        .iter()
        .filter(|r| r.key == key && r.seq > 3)
        .map(|r| r.seq)
        .collect();
    assert!(
        ran_after.is_empty(),
        "fail_rest ran the key's later entries: {ran_after:?}"
    );
    s.check(&BTreeSet::from([poison]));
}
