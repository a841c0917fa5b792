//! The README stands alone: its first program builds as a fresh crate with
//! exactly the dependencies the README lists, offline, against this
//! repository's lockfile, and ends as the README says: a wrong port is one
//! ERROR line and exit 1, an invalid configuration exit 78.

use std::path::Path;
use std::process::Command;

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

#[test]
fn the_first_program_builds_with_the_listed_dependencies_and_ends_as_documented() {
    // The workspace root: rillkit's package, its README and Cargo.lock.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let deps = block(&readme, "first-program-deps");
    let program = block(&readme, "first-program");
    assert!(
        deps.contains("rillkit = \"0.1\""),
        "the README lists rillkit: {deps}"
    );
    let deps = deps.replace(
        "rillkit = \"0.1\"",
        &format!("rillkit = {{ path = {:?} }}", root.display().to_string()),
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"first-program\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n{deps}\n\n[workspace]\n"
        ),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/main.rs"), &program).unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
    // The repository's target directory: the dependencies are built already.
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let target = target.join("readme-first-program");
    let build = || {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = Command::new(cargo)
            .args(["build", "--offline", "--quiet"])
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(dir.path())
            .output()
            .expect("run cargo build");
        assert!(
            out.status.success(),
            "the README's first program does not build with the README's dependencies:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        target.join("debug/first-program")
    };
    let run = |bin: &Path, url: &str| {
        let out = Command::new(bin)
            .env("REDIS_URL", url)
            .env_remove("RUST_LOG")
            .output()
            .expect("run the first program");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // A wrong port: one ERROR line that names the address, exit 1.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bin = build();
    let (code, stderr) = run(&bin, &format!("redis://127.0.0.1:{port}"));
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        errors.len() == 1 && errors[0].contains(&format!("127.0.0.1:{port}")),
        "one ERROR line naming the address:\n{stderr}"
    );

    // An invalid configuration (an empty stream name): the error, exit 78.
    assert!(program.contains("Stream::new(\"orders\""));
    std::fs::write(
        dir.path().join("src/main.rs"),
        program.replace("Stream::new(\"orders\"", "Stream::new(\"\""),
    )
    .unwrap();
    let bin = build();
    let (code, stderr) = run(&bin, &format!("redis://127.0.0.1:{port}"));
    assert_eq!(code, Some(78), "{stderr}");
    assert!(
        stderr.contains("invalid configuration:"),
        "the configuration error printed:\n{stderr}"
    );
}
