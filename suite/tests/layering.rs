//! The crate's layering rule, checked on its source: a top-level module of
//! `src/` may use only modules of lower layers, or modules listed before it
//! in its own layer. ARCHITECTURE.md explains each layer; this list is the
//! rule. A new top-level module must be placed here before the test passes.
//!
//! Every `crate::…` path in code (comments are skipped) counts, including
//! the items of a `use crate::{…}` group and names re-exported at the crate
//! root (`crate::Broker` is a use of `broker`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Bottom first. Within a layer, a module may use those listed before it.
const LAYERS: &[(&str, &[&str])] = &[
    ("base", &["util", "lifecycle", "kind", "error", "keys"]),
    ("connections and topologies", &["connection"]),
    (
        "message vocabulary and telemetry",
        &[
            "order",
            "stream",
            "handler",
            "traceparent",
            "otel",
            "telemetry",
        ],
    ),
    ("shared Redis actor", &["redis"]),
    ("status boards", &["status"]),
    ("delivery core", &["delivery", "reclaimer"]),
    ("sources", &["source"]),
    ("operations beside the consumers", &["retention"]),
    ("supervision", &["supervisor"]),
    ("the broker", &["broker"]),
    ("over the public API", &["admin", "dashboard", "test_util"]),
];

/// One use of a module by another: where, and which module.
#[derive(Debug, PartialEq, Eq)]
struct Use {
    line: usize,
    target: String,
}

/// The rank of every module: (layer, position in the layer).
fn ranks() -> BTreeMap<&'static str, (usize, usize)> {
    let mut out = BTreeMap::new();
    for (layer, (_, mods)) in LAYERS.iter().enumerate() {
        for (pos, m) in mods.iter().enumerate() {
            assert!(
                out.insert(*m, (layer, pos)).is_none(),
                "{m} is listed twice"
            );
        }
    }
    out
}

/// May `from` use `to`?
fn allowed(ranks: &BTreeMap<&str, (usize, usize)>, from: &str, to: &str) -> bool {
    match (ranks.get(from), ranks.get(to)) {
        (Some(f), Some(t)) => t < f,
        _ => false,
    }
}

/// Names the crate root re-exports (`pub use broker::{Broker, …};`), with
/// the module each comes from.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in lib.split(';') {
        let stmt = strip_comments(stmt);
        let Some(rest) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let rest = rest.trim();
        if rest.starts_with("crate::") {
            continue;
        }
        let Some((module, _)) = rest.split_once("::") else {
            continue;
        };
        let names = match rest.find('{') {
            Some(open) => &rest[open + 1..],
            None => rest.rsplit("::").next().unwrap_or(""),
        };
        for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() && name != "self" {
                out.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    out
}

/// The text without `//` comments (line and doc comments).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first path segment of each item of a `{…}` group starting at
/// `text[0] == '{'`, with the line (0-based, relative) it stands on.
fn group_heads(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut item = String::new();
    let mut item_line = 0;
    let mut line = 0;
    let mut expect_head = true;
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    expect_head = true;
                    continue;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    if !item.is_empty() {
                        out.push((item_line, std::mem::take(&mut item)));
                    }
                    break;
                }
            }
            ',' if depth == 1 => {
                if !item.is_empty() {
                    out.push((item_line, std::mem::take(&mut item)));
                }
                expect_head = true;
                if c == '\n' {
                    line += 1;
                }
                continue;
            }
            _ => {}
        }
        if c == '\n' {
            line += 1;
        }
        if depth == 1 && expect_head {
            if c.is_alphanumeric() || c == '_' {
                if item.is_empty() {
                    item_line = line;
                }
                item.push(c);
            } else if !item.is_empty() {
                expect_head = false;
            }
        }
    }
    out
}

/// Every module a source file uses through `crate::` paths.
fn uses(source: &str, reexports: &BTreeMap<String, String>) -> Vec<Use> {
    let code = strip_comments(source);
    let mut out = Vec::new();
    let mut resolve = |line: usize, head: &str| {
        let target = reexports
            .get(head)
            .cloned()
            .unwrap_or_else(|| head.to_owned());
        out.push(Use { line, target });
    };
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::") {
        let at = from + i;
        from = at + "crate::".len();
        // `$crate::` in a macro, or a longer identifier ending in `crate`.
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c == '$' || c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[from..];
        if rest.starts_with('{') {
            for (rel, head) in group_heads(rest) {
                resolve(line + rel, &head);
            }
        } else {
            let head: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !head.is_empty() {
                resolve(line, &head);
            }
        }
    }
    out
}

/// The top-level module a file under `src/` belongs to (`None`: the crate
/// root, or the binary).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    if first == "bin" || first == "lib.rs" {
        return None;
    }
    Some(first.trim_end_matches(".rs").to_owned())
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every use of a module above the user, as `file:line: from -> to`.
fn violations(src: &Path) -> Vec<String> {
    let ranks = ranks();
    let lib = fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let reexports = reexports(&lib);
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let Some(module) = module_of(src, &file) else {
            continue;
        };
        if !ranks.contains_key(module.as_str()) {
            out.push(format!(
                "{}: module `{module}` is in no layer; add it to LAYERS in tests/layering.rs",
                file.display()
            ));
            continue;
        }
        let text = fs::read_to_string(&file).expect("read source");
        for u in uses(&text, &reexports) {
            if u.target == module || !ranks.contains_key(u.target.as_str()) {
                continue;
            }
            if !allowed(&ranks, &module, &u.target) {
                out.push(format!(
                    "{}:{}: `{module}` uses `{}`, which is not below it",
                    file.display(),
                    u.line,
                    u.target
                ));
            }
        }
    }
    out
}

#[test]
fn every_module_uses_only_modules_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let found = violations(&src);
    assert!(
        found.is_empty(),
        "upward dependencies:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_module_of_src_is_in_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let ranks = ranks();
    let lib = fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let declared: BTreeSet<String> = lib
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            l.strip_prefix("mod ")
                .map(|m| m.trim_end_matches(';').to_owned())
        })
        .filter(|m| !m.contains('{') && !m.contains(' '))
        .collect();
    for m in &declared {
        assert!(ranks.contains_key(m.as_str()), "{m} is in no layer");
    }
    for m in ranks.keys() {
        assert!(
            declared.contains(*m),
            "{m} is listed but not declared in lib.rs"
        );
    }
}

/// The check itself finds an upward use, in every form the crate writes one.
#[test]
fn an_upward_use_is_found_with_its_line() {
    let reexports =
        reexports("pub use broker::{Broker, BrokerBuilder};\npub use stream::{Codec, Stream};\n");
    let source = "//! A module.\n\
                  use crate::error::Error;\n\
                  /// See [`crate::supervisor`].\n\
                  use crate::{\n    keys::slot_prefix,\n    broker::builder::Pending,\n};\n\
                  fn f(b: &crate::Broker) {}\n\
                  macro_rules! m { () => { $crate::x() } }\n";
    let found = uses(source, &reexports);
    assert_eq!(
        found,
        vec![
            Use {
                line: 2,
                target: "error".into()
            },
            Use {
                line: 5,
                target: "keys".into()
            },
            Use {
                line: 6,
                target: "broker".into()
            },
            Use {
                line: 8,
                target: "broker".into()
            },
        ]
    );
    let ranks = ranks();
    assert!(allowed(&ranks, "source", "delivery"));
    assert!(!allowed(&ranks, "delivery", "source"));
    assert!(!allowed(&ranks, "source", "broker"));
    assert!(
        allowed(&ranks, "error", "lifecycle"),
        "earlier in its layer"
    );
    assert!(!allowed(&ranks, "lifecycle", "error"), "later in its layer");

    // A whole tree with one upward use: it is reported by file and line.
    let dir = std::env::temp_dir().join(format!("rillkit-layering-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("delivery")).expect("mkdir");
    fs::write(
        dir.join("lib.rs"),
        "mod delivery;\npub use broker::Broker;\n",
    )
    .expect("write");
    fs::write(
        dir.join("delivery/mod.rs"),
        "use crate::error::Error;\n\nfn f(_: crate::Broker) {}\n",
    )
    .expect("write");
    let found = violations(&dir);
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].ends_with("delivery/mod.rs:3: `delivery` uses `broker`, which is not below it"),
        "{}",
        found[0]
    );
}
