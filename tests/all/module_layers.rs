//! Guard rails on the host library's structure, read from its source: the top-level modules of
//! `host/src` import each other without a cycle, `naming` (the shared naming and bounds rules)
//! and `numeric` (number conversions) import nothing of the crate, and `config` imports
//! nothing of the crate but `naming`.
//!
//! An import is any `crate::<module>` path outside a comment (a `use` line, a `crate::{a, b}`
//! group or a path in code); doc links are comments and do not count. The walk only reads files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Modules that import nothing of the crate, and the only crate modules each other named module
/// may import.
const ALLOWED_IMPORTS: &[(&str, &[&str])] =
    &[("naming", &[]), ("numeric", &[]), ("config", &["naming"])];

/// `host/src`.
fn host_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .join("host/src")
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level module a file of `host/src` belongs to (`None` for `lib.rs`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let first = file.strip_prefix(src).ok()?.components().next()?;
    let name = first
        .as_os_str()
        .to_str()?
        .trim_end_matches(".rs")
        .to_string();
    (name != "lib").then_some(name)
}

/// The crate modules `text` names through `crate::` paths, comments left out.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                for part in inner.split(',') {
                    found.insert(leading_ident(part.trim()));
                }
            } else {
                found.insert(leading_ident(rest));
            }
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

fn leading_ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Module -> (imported module -> files importing it).
fn import_graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = host_src();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else {
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read a host source file");
        let rel = file
            .strip_prefix(&src)
            .expect("under host/src")
            .display()
            .to_string();
        let edges = graph.entry(module.clone()).or_default();
        for target in crate_paths(&text) {
            if target != module && modules.contains(&target) {
                edges.entry(target).or_default().insert(rel.clone());
            }
        }
    }
    graph
}

/// One cycle through `start`, if any, as the modules along it.
fn cycle_from(
    graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    start: &str,
) -> Option<Vec<String>> {
    fn walk(
        graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
        at: &str,
        start: &str,
        path: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) -> bool {
        for next in graph.get(at).into_iter().flat_map(|e| e.keys()) {
            if next == start {
                return true;
            }
            if seen.insert(next.clone()) {
                path.push(next.clone());
                if walk(graph, next, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    let mut path = vec![start.to_string()];
    let mut seen = BTreeSet::new();
    walk(graph, start, start, &mut path, &mut seen).then_some(path)
}

#[test]
fn host_modules_import_each_other_without_a_cycle() {
    let graph = import_graph();
    assert!(graph.len() > 10, "host/src read: {:?}", graph.keys());
    let mut cycles = Vec::new();
    for module in graph.keys() {
        if let Some(cycle) = cycle_from(&graph, module) {
            let steps: Vec<String> = cycle
                .iter()
                .zip(cycle.iter().cycle().skip(1))
                .map(|(a, b)| format!("{a} -> {b} ({})", join(&graph[a][b])))
                .collect();
            cycles.push(steps.join("; "));
        }
    }
    assert!(
        cycles.is_empty(),
        "host modules import each other in a circle (move the shared part down a floor):\n{}",
        cycles.join("\n")
    );
}

#[test]
fn naming_and_config_stay_on_the_bottom_floor() {
    let graph = import_graph();
    let mut wrong = Vec::new();
    for (module, allowed) in ALLOWED_IMPORTS {
        let edges = graph
            .get(*module)
            .unwrap_or_else(|| panic!("host/src has no module {module}"));
        for (target, files) in edges {
            if !allowed.contains(&target.as_str()) {
                wrong.push(format!("{module} imports {target} ({})", join(files)));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports from the bottom floor up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_import_reader_sees_use_lines_groups_and_paths_but_not_comments() {
    let text = "use crate::config::Settings;\nuse crate::{queue::QueueKeys, store};\n\
                let x = crate::naming::clip(s, 3); // crate::receive in a comment\n\
                /// [`crate::dispatch::Dispatcher`]\n";
    let found: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(found, ["config", "naming", "queue", "store"]);
}

fn join(files: &BTreeSet<String>) -> String {
    files.iter().cloned().collect::<Vec<_>>().join(", ")
}
