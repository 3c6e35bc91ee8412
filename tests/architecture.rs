//! The crate's shape, checked on every test run: each module imports only from its own
//! package or from a lower layer, and no modules import each other around a circle.
//!
//! docs/ARCHITECTURE.md describes the layers; this test keeps that description true. It reads
//! `src/` as text (every `crate::…` and `super::…` path outside test code) rather than asking
//! the compiler, which is enough for a crate that imports by path.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// The packages (top-level modules) from the bottom up. A package may import from a lower
/// layer, never from a higher one, and never from another package of its own layer, except
/// in the top layer, which wires everything together.
const LAYERS: &[&[&str]] = &[
    // The domain and the metric handles: they import nothing of ours.
    &["model", "metrics"],
    // What the executors and the service build on.
    &["templates", "store"],
    &["executor"],
    &["jobs"],
    // Who is calling and how often: used by the transports. Webhook endpoints and their
    // delivery from the event log: used by the API.
    // Traces of jobs, emitted from the service's events: used by the API and the server.
    &["auth", "rate_limits", "traces", "webhooks"],
    &["graphql"],
    &["hosts", "listener", "web"],
    // Wiring: configuration, start-up, logging; and the command-line client, whose
    // subcommands the configuration parses (it imports nothing of ours: it speaks the API).
    &["config", "server", "telemetry", "cli"],
];

/// Files that are test code: a `tests.rs`, or a module declared only under `#[cfg(test)]`.
fn is_test_file(path: &Path) -> bool {
    matches!(
        path.file_name().and_then(|n| n.to_str()),
        Some("tests.rs" | "test_support.rs")
    )
}

/// The module path of a source file: `src/graphql/ws/mod.rs` → `graphql::ws`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("every file walked is under src/");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts.join("::")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("src/ is readable").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of a file without its `#[cfg(test)] mod tests { … }` block (always the last item
/// where there is one) and without comments.
fn code_of(text: &str) -> String {
    static TESTS: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{")
            .expect("the pattern is valid")
    });
    let cut = TESTS.find(text).map_or(text.len(), |m| m.start());
    text[..cut]
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a file names: `crate::a::b`, each path in `crate::{a::b, c::{d, e}}`, and
/// `super::…` resolved against the file's module.
fn paths_named(module: &str, code: &str) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    static PATH: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"\b(crate|super)((?:::\w+)+|::\{)").expect("the pattern is valid")
    });
    for m in PATH.captures_iter(code) {
        let root = match &m[1] {
            "crate" => String::new(),
            // `super` in module `a::b` (from `a/b.rs` or `a/b/mod.rs` alike) is `a`.
            _ => {
                let mut parts: Vec<&str> = module.split("::").collect();
                parts.pop();
                parts.join("::")
            }
        };
        let join = |tail: &str| {
            let tail = tail.trim_start_matches("::");
            if root.is_empty() {
                tail.to_owned()
            } else {
                format!("{root}::{tail}")
            }
        };
        if &m[2] == "::{" {
            // A group: take each top-level entry's path up to its own group or end.
            let start = m.get(2).expect("group 2 matched").end();
            let mut depth = 1;
            let mut entry = String::new();
            let mut prefix_stack = vec![String::new()];
            for c in code[start..].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        let top = prefix_stack.last().cloned().unwrap_or_default();
                        prefix_stack.push(format!("{top}{}", entry.trim()));
                        entry.clear();
                    }
                    '}' | ',' => {
                        let top = prefix_stack.last().cloned().unwrap_or_default();
                        let item = format!("{top}{}", entry.trim());
                        if !entry.trim().is_empty() {
                            paths.insert(join(&item));
                        }
                        entry.clear();
                        if c == '}' {
                            depth -= 1;
                            prefix_stack.pop();
                            if depth == 0 {
                                break;
                            }
                        }
                    }
                    c if c.is_whitespace() => {}
                    c => entry.push(c),
                }
            }
        } else {
            paths.insert(join(&m[2]));
        }
    }
    paths
}

/// The module a path lands in: its longest prefix that is a module.
fn resolve(path: &str, modules: &BTreeSet<String>) -> Option<String> {
    let segments: Vec<&str> = path
        .split("::")
        .filter(|s| !s.is_empty() && *s != "self")
        .collect();
    (1..=segments.len())
        .rev()
        .map(|n| segments[..n].join("::"))
        .find(|candidate| modules.contains(candidate))
}

fn package(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

fn layer(package: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&package))
}

/// Module → the modules it imports (parents and children excluded: a module may use its
/// own children and its ancestors' items).
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let files: Vec<PathBuf> = files.into_iter().filter(|f| !is_test_file(f)).collect();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        if module.is_empty() {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("source files are readable");
        let targets: BTreeSet<String> = paths_named(&module, &code_of(&text))
            .iter()
            .filter_map(|p| resolve(p, &modules))
            .filter(|t| {
                *t != module
                    && !module.starts_with(&format!("{t}::"))
                    && !t.starts_with(&format!("{module}::"))
            })
            .collect();
        graph.insert(module, targets);
    }
    graph
}

/// Groups of modules that reach each other (Tarjan's strongly connected components), of two
/// or more.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        circles: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w.as_str()]);
                    self.low.insert(v, low);
                } else if self.stack.contains(&w.as_str()) {
                    let low = self.low[v].min(self.index[w.as_str()]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut group = Vec::new();
                while let Some(w) = self.stack.pop() {
                    group.push(w.to_owned());
                    if w == v {
                        break;
                    }
                }
                if group.len() > 1 {
                    group.sort();
                    self.circles.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        circles: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.circles
}

#[test]
fn every_package_has_a_layer() {
    let graph = import_graph();
    let missing: BTreeSet<&str> = graph
        .keys()
        .map(|m| package(m))
        .filter(|p| layer(p).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "packages with no place in tests/architecture.rs's LAYERS (add each where it belongs, and to docs/ARCHITECTURE.md): {missing:?}"
    );
    // The test reads something: the crate's known backbone is found.
    assert!(
        graph["jobs::service"].contains("store"),
        "the service imports the store"
    );
    assert!(
        graph["store::sqlite"].contains("model"),
        "the SQLite store imports the model"
    );
}

#[test]
fn imports_point_down_the_layers() {
    let top = LAYERS.len() - 1;
    let mut wrong = Vec::new();
    for (from, targets) in import_graph() {
        for to in targets {
            let (pf, pt) = (package(&from), package(&to));
            if pf == pt {
                continue;
            }
            let (Some(lf), Some(lt)) = (layer(pf), layer(pt)) else {
                continue;
            };
            let sideways_in_wiring = lf == top && lt == top;
            if lt > lf || (lt == lf && !sideways_in_wiring) {
                wrong.push(format!("{from} → {to} (layer {lf} imports layer {lt})"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run up or sideways between packages (see LAYERS in tests/architecture.rs):\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn no_modules_import_each_other() {
    let found = circles(&import_graph());
    assert!(
        found.is_empty(),
        "modules that import each other, directly or around a circle: {found:?}"
    );
}

/// The most lines a source file may have. A file that outgrows it holds more than one
/// concept: split it by concept rather than raise the limit.
const MAX_FILE_LINES: usize = 900;

/// Every Rust file of the crate, its integration tests and benchmarks, and the Kubernetes API
/// emulator.
fn every_rust_file() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.iter().any(|f| f.ends_with("src/lib.rs"))
            && files
                .iter()
                .any(|f| f.starts_with(root.join("tests/kube-emulator/src"))),
        "the walk reads the crate and the emulator"
    );
    files
}

fn shown(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root).unwrap_or(file).display().to_string()
}

#[test]
fn no_source_file_outgrows_its_walls() {
    let mut long: Vec<String> = every_rust_file()
        .iter()
        .filter_map(|file| {
            let text = std::fs::read_to_string(file).expect("source files are readable");
            let lines = text.lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{} ({lines} lines)", shown(file)))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "source files over {MAX_FILE_LINES} lines (split each by concept):\n  {}",
        long.join("\n  ")
    );
}

/// A name says which thing it is without its path: no two files of `src/` share a file name
/// (`mod.rs` and `tests.rs` aside), and no two public types of the crate share a name.
#[test]
fn names_do_not_collide() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);

    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in &files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !matches!(name, "mod.rs" | "tests.rs" | "lib.rs" | "main.rs") {
            by_name.entry(name.to_owned()).or_default().push(shown(file));
        }
    }

    static TYPE: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"(?m)^\s*pub(?:\([a-z]+\))?\s+(?:struct|enum|trait|type)\s+(\w+)")
            .expect("the pattern is valid")
    });
    let mut by_type: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files.iter().filter(|f| !is_test_file(f)) {
        let text = std::fs::read_to_string(file).expect("source files are readable");
        for m in TYPE.captures_iter(&code_of(&text)) {
            by_type.entry(m[1].to_owned()).or_default().push(shown(file));
        }
    }
    assert!(
        by_type.contains_key("JobService"),
        "the walk finds the crate's types"
    );

    let clashes: Vec<String> = by_name
        .iter()
        .chain(&by_type)
        .filter(|(_, places)| places.len() > 1)
        .map(|(name, places)| format!("{name}: {}", places.join(", ")))
        .collect();
    assert!(
        clashes.is_empty(),
        "names that collide (rename so each says which one it is):\n  {}",
        clashes.join("\n  ")
    );
}

/// The repository's code and docs speak to its users: they cite nothing a clone does not
/// hold (the team's private reference folder) and no issue numbers (what is, and why, belongs
/// in the text; how it came to be belongs to git). Migrations are left as they were applied:
/// sqlx checks each applied one against its checksum.
#[test]
fn text_cites_only_what_the_repository_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    static CITATION: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(concat!(
            r"\bshared/(?:reference|DESIGN|STYLE|graphql-contract)",
            r"|\b[Ii]ssues? #?[0-9]+\b"
        ))
        .expect("the pattern is valid")
    });
    let mut files = every_rust_file();
    for dir in ["docs", "deploy", "scripts", "web/src", "web/e2e", ".ci"] {
        text_files(&root.join(dir), &mut files);
    }
    for file in [
        "README.md",
        "BENCHMARKS.md",
        "Cargo.toml",
        "tests/kube-emulator/README.md",
    ] {
        files.push(root.join(file));
    }
    let this_file = root.join("tests/architecture.rs");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != this_file) {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(m) = CITATION.find(line) {
                found.push(format!("{}:{}: {}", shown(file), n + 1, m.as_str()));
            }
        }
    }
    assert!(
        files.iter().any(|f| f.ends_with("docs/ARCHITECTURE.md")),
        "the walk reads the docs"
    );
    assert!(
        found.is_empty(),
        "citations a user of the repository cannot follow:\n  {}",
        found.join("\n  ")
    );
}

/// Every file below `dir` that is not a build or package directory.
fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if !matches!(name.to_str(), Some("node_modules" | "target" | "dist" | ".venv")) {
                text_files(&path, out);
            }
        } else {
            out.push(path);
        }
    }
}
