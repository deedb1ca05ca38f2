//! Checks of the code's shape that CI runs: error messages are read only where a `tonic::Status` becomes an `Error`, and no library file grows past ~500 lines.
//!
//! Both rules drift silently: a `status.message().contains(..)` in the balancer is a second
//! classification of the same error that nobody updates with the first (there were seven), and
//! a file that grows one helper at a time stops having one job. The size rule is a ratchet:
//! the files already over the limit are listed with their size today and may only shrink.

use std::path::{Path, PathBuf};

/// The one file that may read error messages and error source chains.
const CLASSIFIER: &str = "src/error/status.rs";

/// Lines per file in `src/` (outside the testkit) before a file must be split.
const MAX_LINES: usize = 500;

/// Files over [`MAX_LINES`] when the rule came in (2026-12-03), at their size then: each may
/// shrink, none may grow. Remove a row once its file is under the limit.
const OVER_THE_LIMIT: &[(&str, usize)] = &[
    ("src/client.rs", 520),
    ("src/keeper/state_tests.rs", 528),
    ("src/concurrency/leadership.rs", 539),
    ("src/options/mod.rs", 540),
    ("src/keeper/task.rs", 554),
    ("src/rpc.rs", 575),
    ("src/endpoint/mod.rs", 591),
    ("src/balance/mod.rs", 661),
    ("src/call/driver_tests.rs", 824),
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
        let limit = OVER_THE_LIMIT
            .iter()
            .find(|(file, _)| *file == name)
            .map_or(MAX_LINES, |(_, today)| *today);
        if lines > limit {
            found.push(format!("{name}: {lines} lines, at most {limit}"));
        }
    }
    assert!(
        found.is_empty(),
        "split these files (one job each):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_look_for() {
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
