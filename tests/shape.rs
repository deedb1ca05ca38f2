//! Checks of the code's shape that CI runs: error messages are read only where a `tonic::Status`
//! becomes an `Error`, no library file grows past ~500 lines, and the routing core imports
//! only downwards.
//!
//! Both rules drift silently: a `status.message().contains(..)` in the balancer is a second
//! classification of the same error that nobody updates with the first (there were seven), and
//! a file that grows one helper at a time stops having one job. The size rule was a ratchet
//! from 2026-12-03 (nine files over the limit, listed at their size then) until the last of
//! them was split (2026-12-05); it holds for every file now.

use std::path::{Path, PathBuf};

/// The one file that may read error messages and error source chains.
const CLASSIFIER: &str = "src/error/status.rs";

/// Lines per file in `src/` (outside the testkit) before a file must be split.
const MAX_LINES: usize = 500;

/// The routing core, lowest layer first (the map in `src/lib.rs`): a layer's own code imports
/// nothing from a layer after it here, nor from [`ABOVE_THE_CORE`].
const CORE: [&str; 3] = ["endpoint", "balance", "call"];

/// The modules built on the core: the typed services, recipes and the client itself.
const ABOVE_THE_CORE: &[&str] = &[
    "auth",
    "cache",
    "channel",
    "client",
    "cluster",
    "concurrency",
    "connect",
    "discovery",
    "drain",
    "election",
    "events",
    "keeper",
    "kv",
    "lease",
    "lock",
    "maintenance",
    "namespace",
    "response",
    "session",
    "testkit",
    "txn",
    "watch",
];

fn library_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // The testkit starts processes and parses their output: not the client.
                if !path.ends_with("testkit") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// Whether `line` decides something by the text of a status's message.
fn matches_a_message(line: &str) -> bool {
    let code = line.trim_start();
    if code.starts_with("//") {
        return false;
    }
    let Some(at) = code.find(".message()") else {
        return false;
    };
    let after = &code[at + ".message()".len()..];
    [
        ".contains(",
        ".starts_with(",
        ".ends_with(",
        " == ",
        ".strip_prefix(",
    ]
    .iter()
    .any(|test| after.starts_with(test))
}

#[test]
fn error_messages_are_read_only_where_errors_are_made() {
    let mut found = Vec::new();
    for path in library_files() {
        if path == Path::new(CLASSIFIER) {
            continue;
        }
        for (n, line) in read(&path).lines().enumerate() {
            if matches_a_message(line) {
                found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a status's message is matched outside {CLASSIFIER}; give the fact a predicate or an \
         ErrorClass there:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_library_file_grows_past_the_limit() {
    let mut found = Vec::new();
    for path in library_files() {
        let lines = read(&path).lines().count();
        let name = path.to_string_lossy().into_owned();
        if lines > MAX_LINES {
            found.push(format!("{name}: {lines} lines, at most {MAX_LINES}"));
        }
    }
    assert!(
        found.is_empty(),
        "split these files (one job each):\n{}",
        found.join("\n")
    );
}

/// The file's own code: what comes before its test module (tests may build what they need
/// from anywhere).
fn own_code(text: &str) -> &str {
    ["\n#[cfg(test)]\nmod ", "\n#[cfg(test)]\n#[path"]
        .iter()
        .filter_map(|marker| text.find(marker))
        .min()
        .map_or(text, |at| &text[..at])
}

/// The crate's top-level modules that `code` names through `crate::` paths, grouped ones
/// (`crate::{a::X, b}`) included.
fn crate_modules(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            found.extend(group[..end].split(',').map(ident));
        } else {
            found.push(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn the_routing_core_imports_only_downwards() {
    let mut found = Vec::new();
    for (layer, name) in CORE.iter().enumerate() {
        let higher: Vec<&str> = CORE[layer + 1..]
            .iter()
            .chain(ABOVE_THE_CORE)
            .copied()
            .collect();
        for path in library_files() {
            let file = path.to_string_lossy().into_owned();
            if !file.starts_with(&format!("src/{name}/")) || file.ends_with("_tests.rs") {
                continue;
            }
            let text = read(&path);
            for module in crate_modules(own_code(&text)) {
                if higher.contains(&module.as_str()) {
                    found.push(format!("{file}: crate::{module} (above {name}/)"));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    assert!(
        found.is_empty(),
        "a layer of the routing core reaches up (move the item down, or pass it in):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
    assert_eq!(
        crate_modules("use crate::kv::Kv;\nlet t = crate::txn::x(); use crate::{watch::W, error};"),
        ["kv", "txn", "watch", "error"]
    );
    assert_eq!(
        own_code("use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::kv;\n}"),
        "use crate::a;"
    );
    assert!(matches_a_message(
        r#"    Error::Unavailable(s) if s.message().ends_with("unhealthy cluster") => {}"#
    ));
    assert!(matches_a_message(r#"if status.message() == "x" {"#));
    assert!(!matches_a_message(
        r#"    // status.message().contains("x")"#
    ));
    assert!(!matches_a_message(
        r#"format!("lost ({})", status.message())"#
    ));
    assert!(library_files().len() > 50, "the walk found the library");
    assert!(library_files().contains(&PathBuf::from(CLASSIFIER)));
}
