//! The README stands alone: its first program compiles as a fresh crate with
//! exactly the dependencies the README lists, offline, against this
//! repository's lockfile.

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
fn the_first_program_builds_as_a_fresh_crate_with_the_listed_dependencies() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
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
    std::fs::write(dir.path().join("src/main.rs"), program).unwrap();
    std::fs::copy(root.join("Cargo.lock"), dir.path().join("Cargo.lock")).unwrap();
    // The repository's target directory: the dependencies are built already.
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["check", "--offline", "--quiet"])
        .env("CARGO_TARGET_DIR", target.join("readme-first-program"))
        .current_dir(dir.path())
        .output()
        .expect("run cargo check");
    assert!(
        out.status.success(),
        "the README's first program does not build with the README's dependencies:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
