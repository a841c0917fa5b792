//! A server that is still loading its dataset: it answers `-LOADING` to
//! ordinary commands for a few seconds, as a production Redis does after a
//! restart with a big dump.
#![allow(dead_code)]

use super::{Ready, RedisServer};

impl RedisServer {
    /// A server that is busy loading `populate_keys` keys from its dump, each
    /// key taking `key_load_delay_us` µs to load; see
    /// [`RedisServer::start_loading_with`].
    ///
    /// Measured here (2 cores, redis 7.0.15; the delay is a `usleep` per key,
    /// so the real time per key is about twice the figure):
    /// `start_loading(30_000, 50)` loads for about 4 s (3.9–4.5 s over six
    /// runs of `tests/harness.rs`; the setup before it takes about 0.1 s),
    /// `start_loading(30_000, 100)` for about 5.5 s,
    /// `start_loading(100_000, 50)` for about 13 s.
    pub fn start_loading(populate_keys: u64, key_load_delay_us: u64) -> RedisServer {
        Self::start_loading_with(|_| {}, populate_keys, key_load_delay_us)
    }

    /// Starts a server with `--enable-debug-command local`, runs `seed` on a
    /// connection to it (e.g. to put a stream and a group in the dump), then
    /// `DEBUG POPULATE <populate_keys>` and `SAVE`, and restarts it on the
    /// same port and dir with `--key-load-delay <key_load_delay_us>` and
    /// `--loading-process-events-interval-bytes 1024`, so that it loads the
    /// dump slowly while answering clients (`-LOADING`) between keys.
    ///
    /// Returns as soon as the restarted server answers anything, while it is
    /// still loading; [`RedisServer::restart`] does the same again (the dump
    /// is still there). Once the load is over the server answers normally,
    /// with the seeded data and the `key:<n>` keys.
    ///
    /// # Panics
    /// When the server does not start, or has already finished loading when
    /// it first answers (raise the figures).
    pub fn start_loading_with(
        seed: impl FnOnce(&mut redis::Connection),
        populate_keys: u64,
        key_load_delay_us: u64,
    ) -> RedisServer {
        let mut s = RedisServer::start_with(&["--enable-debug-command", "local"]);
        {
            let mut c = s.conn();
            seed(&mut c);
            let _: () = redis::cmd("DEBUG")
                .arg("POPULATE")
                .arg(populate_keys)
                .query(&mut c)
                .expect("DEBUG POPULATE");
            let _: () = redis::cmd("SAVE").query(&mut c).expect("SAVE");
        }
        s.stop();
        let delay = key_load_delay_us.to_string();
        s.args = [
            "--enable-debug-command",
            "local",
            "--key-load-delay",
            &delay,
            "--loading-process-events-interval-bytes",
            "1024",
        ]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
        s.ready = Ready::Answers;
        s.spawn();
        assert!(
            s.is_loading(),
            "redis-server on port {} had finished loading {populate_keys} keys \
             ({key_load_delay_us} µs each) before it answered; raise the figures. log:\n{}",
            s.port,
            s.log()
        );
        s
    }

    /// Whether the server is loading its dataset: `PING` answers `-LOADING`,
    /// or `INFO persistence` says `loading:1`. `false` when it cannot be
    /// reached.
    pub fn is_loading(&self) -> bool {
        let Some(mut c) = super::try_conn(self.port) else {
            return false;
        };
        match redis::cmd("PING").query::<String>(&mut c) {
            Err(e) => e.code() == Some("LOADING"),
            Ok(_) => {
                redis::cmd("INFO")
                    .arg("persistence")
                    .query::<String>(&mut c)
                    .ok()
                    .and_then(|i| super::info_field(&i, "loading"))
                    .as_deref()
                    == Some("1")
            }
        }
    }
}
