//! The crate's layering rule, checked on its source: a top-level module of
//! `src/` may use only modules of lower layers, or modules listed before it
//! in its own layer. ARCHITECTURE.md explains each layer; this list is the
//! rule. A new top-level module must be placed here before the test passes.
//!
//! Every `crate::…` path in code (comments are skipped) counts, including
//! the items of a `use crate::{…}` group, names re-exported at the crate
//! root (`crate::Broker` is a use of `broker`) or by the prelude
//! (`crate::prelude::Stream` is a use of `stream`), and `$crate::` paths in
//! macros. Paths the check could not follow are refused: a glob of the crate
//! root or the prelude (`use crate::*`), a `crate::` path that names no
//! module or re-exported item, and a `super::` path that climbs out of its
//! top-level module (write `crate::other::…` instead).
//!
//! Inside the sources and the delivery core a second rule holds, file by
//! file: a component's state (a struct with a `&mut self` method) is
//! private to the file that defines it.

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
            "rate_limit",
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
    (
        "operations beside the consumers",
        &["retention", "schedule", "fleet"],
    ),
    ("supervision", &["supervisor"]),
    ("the broker", &["broker"]),
    ("over the public API", &["admin", "test_util"]),
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

/// What a glob (`crate::*`, `crate::prelude::*`) resolves to: no module.
const GLOB: &str = "*";

/// The identifier at the start of `text`.
fn segment(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// How deep `file` sits below `src/`: 1 for a top-level module
/// (`keys.rs`, `source/mod.rs`), 2 for its child (`source/list/mod.rs`,
/// `status/board.rs`), and so on.
fn depth(src: &Path, file: &Path) -> usize {
    let rel = file.strip_prefix(src).expect("under src");
    let parts = rel.components().count();
    if rel.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

/// The lines of `super::` paths that climb to the crate root or above from
/// a file `depth` modules deep (inline `mod … {}` blocks are not counted:
/// a file that nests them may climb one more level per block).
fn escaping_supers(source: &str, depth: usize) -> Vec<usize> {
    let code = strip_comments(source);
    let inline = code.matches("mod tests {").count();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("super::") {
        let at = from + i;
        let before = code[..at].chars().next_back();
        let mut climbs = 0;
        let mut rest = &code[at..];
        while let Some(r) = rest.strip_prefix("super::") {
            climbs += 1;
            rest = r;
        }
        from = at + climbs * "super::".len();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if climbs >= depth + inline {
            out.push(code[..at].matches('\n').count() + 1);
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
        // A longer identifier ending in `crate` (`$crate::` in a macro
        // counts: the macro's expansion uses that module).
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[from..];
        if rest.starts_with('{') {
            for (rel, head) in group_heads(rest) {
                resolve(line + rel, &head);
            }
        } else if rest.starts_with('*') {
            resolve(line, GLOB);
        } else {
            let head = segment(rest);
            match rest[head.len()..].strip_prefix("::") {
                // The prelude re-exports root names: follow it one step.
                Some(after) if head == "prelude" => {
                    if after.starts_with('*') || after.starts_with('{') {
                        resolve(line, GLOB);
                    } else {
                        resolve(line, &segment(after));
                    }
                }
                _ if !head.is_empty() => resolve(line, &head),
                _ => {}
            }
        }
    }
    out
}

/// The top-level module a file under `src/` belongs to (`None`: the crate
/// root).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    if first == "lib.rs" {
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
        for line in escaping_supers(&text, depth(src, &file)) {
            out.push(format!(
                "{}:{line}: a `super::` path leaves `{module}`: write `crate::…`",
                file.display()
            ));
        }
        for u in uses(&text, &reexports) {
            if u.target == GLOB {
                out.push(format!(
                    "{}:{}: a glob import of the crate root or the prelude hides what `{module}` uses",
                    file.display(),
                    u.line
                ));
                continue;
            }
            if !ranks.contains_key(u.target.as_str()) {
                out.push(format!(
                    "{}:{}: `crate::{}` names no module of src/ nor a name lib.rs re-exports",
                    file.display(),
                    u.line,
                    u.target
                ));
                continue;
            }
            if u.target == module {
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
            // `$crate::` in a macro is a use too.
            Use {
                line: 9,
                target: "x".into()
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

/// What the check cannot follow is refused: globs of the crate root and the
/// prelude, `crate::` paths to nothing it knows, and `super::` paths that
/// climb out of their top-level module; the prelude and `$crate::` are
/// followed to the module they name.
#[test]
fn paths_the_check_cannot_follow_are_refused() {
    let dir = std::env::temp_dir().join(format!("rillkit-layering-paths-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("delivery/inner")).expect("mkdir");
    fs::write(
        dir.join("lib.rs"),
        "mod delivery;\npub use broker::Broker;\npub use stream::Stream;\n",
    )
    .expect("write");
    fs::write(
        dir.join("delivery/mod.rs"),
        "use crate::*;\n\
         use crate::prelude::Broker;\n\
         use crate::prelude::Stream;\n\
         fn f(_: crate::nowhere::X) {}\n\
         macro_rules! m { () => { $crate::supervisor::go() } }\n\
         use super::broker::B;\n\
         use self::inner::Y;\n",
    )
    .expect("write");
    fs::write(
        dir.join("delivery/inner/mod.rs"),
        "use super::Z;\nuse super::super::broker::B;\n",
    )
    .expect("write");
    let found = violations(&dir);
    let _ = fs::remove_dir_all(&dir);
    let expect = [
        "delivery/inner/mod.rs:2: a `super::` path leaves `delivery`",
        "delivery/mod.rs:6: a `super::` path leaves `delivery`",
        "delivery/mod.rs:1: a glob import of the crate root or the prelude",
        "delivery/mod.rs:2: `delivery` uses `broker`, which is not below it",
        "delivery/mod.rs:4: `crate::nowhere` names no module",
        "delivery/mod.rs:5: `delivery` uses `supervisor`, which is not below it",
    ];
    assert_eq!(found.len(), expect.len(), "{found:#?}");
    for (f, e) in found.iter().zip(expect) {
        assert!(f.contains(e), "{f:?} should say {e:?}");
    }
}

/// No file of `src/` imports its parent whole (`use super::*;` at the top
/// level): a file names what it uses, so what it may touch shows in its
/// imports. Unit tests (`tests.rs`, or a `mod tests` block) may.
#[test]
fn no_file_imports_its_parent_whole() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .filter(|f| {
            fs::read_to_string(f)
                .expect("read source")
                .lines()
                .any(|l| l.trim_end() == "use super::*;")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        found.is_empty(),
        "`use super::*;` at the top of:\n{}",
        found.join("\n")
    );
}

/// The structs of `text` that keep state (a method of theirs in the same
/// text takes `&mut self`) and still show a field to other files (`pub`,
/// `pub(crate)`, `pub(super)`, `pub(in …)`): `"Name.field"` for each.
fn open_state(text: &str) -> Vec<String> {
    let text = strip_comments(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let decl = line
            .strip_prefix("struct ")
            .or_else(|| line.strip_prefix("pub struct "))
            .or_else(|| {
                let rest = line.strip_prefix("pub(")?;
                rest.split_once(") struct ").map(|(_, r)| r)
            });
        let Some(decl) = decl.filter(|d| d.trim_end().ends_with('{')) else {
            i += 1;
            continue;
        };
        let name: String = decl
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let indent = lines[i].len() - line.len();
        let mut open = Vec::new();
        i += 1;
        while i < lines.len() && lines[i].trim() != "}" {
            let field = lines[i].trim_start();
            if lines[i].len() - field.len() == indent + 4 && field.starts_with("pub") {
                let after = field.trim_start_matches("pub");
                let after = match after.strip_prefix('(') {
                    Some(r) => r.split_once(')').map_or("", |(_, r)| r),
                    None => after,
                };
                if let Some((f, _)) = after.trim_start().split_once(':') {
                    open.push(f.trim().to_owned());
                }
            }
            i += 1;
        }
        if !open.is_empty() && keeps_state(&text, &name) {
            found.extend(open.into_iter().map(|f| format!("{name}.{f}")));
        }
    }
    found
}

/// Whether an `impl` of `name` in `text` has a method taking `&mut self`.
fn keeps_state(text: &str, name: &str) -> bool {
    let mut in_impl = false;
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("impl") {
            // `impl Name {`, `impl<T> Name<T> {`; not `impl Trait for Name`
            // (a trait's methods are the trait's business).
            let head = head.trim_start();
            let head = match head.strip_prefix('<') {
                Some(r) => r.split_once('>').map_or("", |(_, r)| r.trim_start()),
                None => head,
            };
            in_impl = !head.contains(" for ")
                && head
                    .strip_prefix(name)
                    .is_some_and(|r| r.starts_with([' ', '<', '{']));
        } else if line == "}" {
            in_impl = false;
        } else if in_impl && line.contains("&mut self") {
            return true;
        }
    }
    false
}

/// Inside the sources and the delivery core, a component's state is
/// private to its file: a struct with a `&mut self` method keeps every
/// field private, so only the file that defines it changes it, and the
/// loop reaches it through its methods. (Plain records, with no such
/// method, may show their fields.)
#[test]
fn a_components_state_is_private_to_its_file() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../src");
    let mut files = Vec::new();
    rust_files(&src.join("source"), &mut files);
    rust_files(&src.join("delivery"), &mut files);
    let found: Vec<String> = files
        .iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .flat_map(|f| {
            let text = fs::read_to_string(f).expect("read source");
            open_state(&text)
                .into_iter()
                .map(move |s| format!("{}: {s}", f.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "fields of stateful structs visible outside their file:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_open_field_of_a_stateful_struct_is_found() {
    let text = "\
pub(super) struct Acks {
    pub(super) waiting: Vec<u64>,
    since: Option<u64>,
}

impl Acks {
    pub(super) fn push(&mut self, id: u64) {
        self.waiting.push(id);
    }
}

pub(super) struct Record {
    pub(super) id: u64,
}

impl Record {
    fn id(&self) -> u64 {
        self.id
    }
}

struct Shown {
    pub name: String,
}

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}
";
    assert_eq!(open_state(text), vec!["Acks.waiting".to_owned()]);
}
