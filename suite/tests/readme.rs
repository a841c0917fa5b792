//! The README stands alone: its first program builds as a fresh crate with
//! exactly the dependencies the README lists, offline, against this
//! repository's lockfile, and ends as the README says: a wrong port is one
//! ERROR line and exit 1, an invalid configuration exit 78, SIGTERM with an
//! order in flight drains it and exits 0, a second signal exits 1; under
//! `#[actix::main]` as written and under `#[tokio::main]`. The guide's
//! getting-started chapter shows the same program, word for word. The
//! guide's tokio recipe (`docs/guide/src/shutdown.md`, a program that calls
//! `stop()` itself) ends the same way on one signal and on two.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use redis::Commands as _;
use support::{RedisServer, Worker, eventually_blocking, pending_count};

const WAIT: Duration = Duration::from_secs(60);

/// The text between `<!-- name -->` and `<!-- /name -->`, without its code
/// fence.
fn block(readme: &str, name: &str) -> String {
    let (open, close) = (format!("<!-- {name} -->"), format!("<!-- /{name} -->"));
    let start = readme.find(&open).unwrap_or_else(|| panic!("no {open}")) + open.len();
    let len = readme[start..]
        .find(&close)
        .unwrap_or_else(|| panic!("no {close}"));
    readme[start..start + len]
        .lines()
        .filter(|l| !l.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The README's first program and its dependencies, `rillkit` pointing at
/// this repository. The guide's getting-started chapter has the same.
struct FirstProgram {
    deps: String,
    program: String,
}

impl FirstProgram {
    fn read() -> FirstProgram {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        let deps = block(&readme, "first-program-deps");
        let program = block(&readme, "first-program");
        let guide =
            std::fs::read_to_string(root.join("docs/guide/src/getting-started.md")).unwrap();
        assert_eq!(
            block(&guide, "first-program-deps"),
            deps,
            "the guide lists the README's dependencies"
        );
        assert_eq!(
            block(&guide, "first-program"),
            program,
            "the guide shows the README's first program"
        );
        let listed = "rillkit = { path = \"../rillkit\" }";
        assert!(deps.contains(listed), "the README lists rillkit: {deps}");
        let deps = deps.replace(
            listed,
            &format!("rillkit = {{ path = {:?} }}", root.display().to_string()),
        );
        FirstProgram { deps, program }
    }

    /// Builds `program` with the README's dependencies and `extra` ones as
    /// the package `name`; answers its binary.
    fn build(&self, name: &str, extra: &str, program: &str) -> PathBuf {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("Cargo.toml"),
            format!(
                "[package]\nname = \"{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n{}\n{extra}\n\n[workspace]\n",
                self.deps
            ),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/main.rs"), program).unwrap();
        std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
        // The repository's target directory: the dependencies are built
        // already. Each variant has a name of its own, so parallel tests
        // never overwrite each other's binary.
        let target = std::env::var("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|_| root.join("target"))
            .join("readme-first-program");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "--offline", "--quiet"])
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(dir.path())
            .output()
            .expect("run cargo build");
        assert!(
            out.status.success(),
            "the README's first program ({name}) does not build with the README's dependencies:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("debug").join(name)
    }

    /// The program with a handler that says `billing <id>` on stdout and
    /// takes 5 s before it goes on: an order in flight long enough to
    /// signal.
    fn slow(&self) -> String {
        let check = "check(&order).await.with_context(|| format!(\"order {}\", order.id))?;";
        assert!(self.program.contains(check), "{}", self.program);
        self.program.replace(
            check,
            &format!(
                "{check}\nprintln!(\"billing {{}}\", order.id);\nactix::clock::sleep(std::time::Duration::from_secs(5)).await;"
            ),
        )
    }
}

fn run(bin: &Path, url: &str) -> (Option<i32>, String) {
    let out = Command::new(bin)
        .env("REDIS_URL", url)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the first program");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_first_program_builds_with_the_listed_dependencies_and_ends_as_documented() {
    let first = FirstProgram::read();
    // A wrong port: one ERROR line that names the address, exit 1.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin = first.build("first-program", "", &first.program);
    let (code, stderr) = run(&bin, &format!("redis://127.0.0.1:{port}"));
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        errors.len() == 1 && errors[0].contains(&format!("127.0.0.1:{port}")),
        "one ERROR line naming the address:\n{stderr}"
    );

    // An invalid configuration (an empty stream name): the error, exit 78.
    assert!(first.program.contains("Stream::new(\"orders\""));
    let bin = first.build(
        "first-program-bad-config",
        "",
        &first
            .program
            .replace("Stream::new(\"orders\"", "Stream::new(\"\""),
    );
    let (code, stderr) = run(&bin, &format!("redis://127.0.0.1:{port}"));
    assert_eq!(code, Some(78), "{stderr}");
    assert!(
        stderr.contains("invalid configuration:"),
        "the configuration error printed:\n{stderr}"
    );
}

/// SIGTERM with an order in flight: it finishes, is acked, its invoice is
/// published, exit 0. Then a second run: SIGTERM, then SIGTERM again during
/// the drain: exit 1 at once.
fn signals_end_it_as_documented(bin: &Path) {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let start = || {
        let mut cmd = Command::new(bin);
        cmd.env("REDIS_URL", redis.url()).env_remove("RUST_LOG");
        let p = Worker::spawn_command(cmd);
        eventually_blocking("the after_startup hook's line", WAIT, || {
            p.log().iter().any(|l| l.contains("billing orders"))
        });
        p
    };
    let publish = |conn: &mut redis::Connection, id: u64| {
        let data = format!(r#"{{"id":{id},"qty":"2","total":9.5}}"#);
        let _: String = conn.xadd("orders", "*", &[("data", data)]).unwrap();
    };

    let mut p = start();
    publish(&mut conn, 1);
    eventually_blocking("order 1 in flight", WAIT, || {
        p.lines().iter().any(|l| l == "billing 1")
    });
    p.signal("TERM");
    assert_eq!(p.wait_exit(WAIT), Some(0), "{:?}", p.log());
    assert!(
        p.lines().iter().any(|l| l.starts_with("order 1 for 9.50")),
        "the order in flight finished: {:?}",
        p.lines()
    );
    assert_eq!(pending_count(&mut conn, "orders", "billing"), 0, "acked");
    assert_eq!(conn.xlen::<_, usize>("invoices").unwrap(), 1);

    let mut p = start();
    publish(&mut conn, 2);
    eventually_blocking("order 2 in flight", WAIT, || {
        p.lines().iter().any(|l| l == "billing 2")
    });
    p.signal("TERM");
    eventually_blocking("the drain begun", WAIT, || {
        p.log().iter().any(|l| l.contains("draining"))
    });
    p.signal("TERM");
    assert_eq!(p.wait_exit(WAIT), Some(1), "{:?}", p.log());
    assert!(
        !p.lines().iter().any(|l| l.starts_with("order 2 for")),
        "the second signal did not wait for the handler: {:?}",
        p.lines()
    );
    assert_eq!(
        pending_count(&mut conn, "orders", "billing"),
        1,
        "order 2 stays pending, for another consumer to reclaim"
    );
}

#[test]
fn under_actix_main_a_signal_drains_and_a_second_exits_1() {
    let first = FirstProgram::read();
    assert!(first.program.contains("#[actix::main]"));
    let bin = first.build("first-program-actix", "", &first.slow());
    signals_end_it_as_documented(&bin);
}

#[test]
fn under_tokio_main_a_signal_drains_and_a_second_exits_1() {
    let first = FirstProgram::read();
    let program = first.slow().replace("#[actix::main]", "#[tokio::main]");
    let bin = first.build(
        "first-program-tokio",
        "tokio = { version = \"1\", features = [\"macros\", \"rt-multi-thread\"] }",
        &program,
    );
    signals_end_it_as_documented(&bin);
}

/// The guide's tokio recipe: `shutdown_signal()`, then `stop()` raced
/// against a second `shutdown_signal()`. Built with the first program's
/// dependencies and tokio, its handler made to take 5 s: one SIGTERM with an
/// order in flight drains it and exits 0; a second SIGTERM during the drain
/// exits 1 at once and leaves the order pending.
#[test]
fn the_tokio_recipe_drains_on_a_signal_and_exits_1_on_a_second() {
    let first = FirstProgram::read();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let guide = std::fs::read_to_string(root.join("docs/guide/src/shutdown.md")).unwrap();
    let recipe = block(&guide, "tokio-recipe");
    let handled = "println!(\"order {id}\");";
    assert!(recipe.contains(handled), "{recipe}");
    let started = "broker.start().await?;";
    assert!(recipe.contains(started), "{recipe}");
    // The order's run and a line once `start()` answered: the signal
    // handlers are installed right after it.
    let recipe = recipe
        .replace(
            handled,
            &format!("{handled}\nactix::clock::sleep(std::time::Duration::from_secs(5)).await;"),
        )
        .replace(started, &format!("{started}\neprintln!(\"started\");"));
    let bin = first.build(
        "tokio-recipe",
        "tokio = { version = \"1\", features = [\"macros\", \"rt-multi-thread\"] }",
        &recipe,
    );

    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let start = |id: u64, conn: &mut redis::Connection| {
        let mut cmd = Command::new(&bin);
        cmd.env("REDIS_URL", redis.url()).env_remove("RUST_LOG");
        let p = Worker::spawn_command(cmd);
        eventually_blocking("the broker started", WAIT, || {
            p.log().iter().any(|l| l == "started")
        });
        let _: String = conn
            .xadd("orders", "*", &[("data", id.to_string())])
            .unwrap();
        eventually_blocking("the order in flight", WAIT, || {
            p.lines().iter().any(|l| *l == format!("order {id}"))
        });
        p
    };

    let mut p = start(1, &mut conn);
    p.signal("TERM");
    assert_eq!(p.wait_exit(WAIT), Some(0), "{:?}", p.log());
    assert_eq!(pending_count(&mut conn, "orders", "billing"), 0, "acked");

    let mut p = start(2, &mut conn);
    p.signal("TERM");
    eventually_blocking("the drain begun", WAIT, || {
        p.log().iter().any(|l| l.starts_with("stopping: draining"))
    });
    p.signal("TERM");
    assert_eq!(p.wait_exit(WAIT), Some(1), "{:?}", p.log());
    assert_eq!(
        pending_count(&mut conn, "orders", "billing"),
        1,
        "order 2 stays pending, for another consumer to reclaim"
    );
}
