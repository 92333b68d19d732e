//! The docs stay honest: every command `README.md`, `docs/*.md`, `bench/README.md` and
//! `plugins/README.md` show still works, and every relative link among them resolves.
//!
//! - Fenced blocks whose info string is `sh offline` are run as written, line by line, with `sh`,
//!   from a scratch directory holding the repository's `routes.toml`, `contracts/` and
//!   `plugins/`, with the built `outbox` and `outbox-bench` first on `PATH` and PostgreSQL and
//!   Redis out of reach: each line must exit 0.
//! - Every other `outbox ...` or `outbox-bench ...` command (in `sh` blocks, or inline as
//!   `` `outbox ...` ``) needs services, so it is checked, not run: each subcommand it names
//!   must be one the built binary lists, and each `--flag` one that subcommand's `--help`
//!   lists. `scripts/bench.sh` passes its arguments to `outbox-bench`, and is checked as it.
//!   A `scripts/...` command names a file that exists.
//! - Every `[text](target)` link that is not a URL names a file or directory that exists, and
//!   its `#anchor`, if any, is a heading of the target (GitHub's anchor rule).
//!
//! Never touches a database or Redis: the checks read `--help`, the runs have no services.
#![allow(
    clippy::disallowed_methods,
    reason = "tests read and write PostgreSQL and Redis directly to check the host"
)]
// A test crate: a failed unwrap is a failed test, with the reason in the panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root (the workspace holding `cli/`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ has a parent")
        .to_path_buf()
}

/// The Markdown files whose commands and links are checked, relative to the root.
fn doc_files() -> Vec<String> {
    let root = repo_root();
    let mut files = vec![
        "README.md".to_string(),
        "bench/README.md".to_string(),
        "plugins/README.md".to_string(),
    ];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A command a doc shows: where, its text, and whether the doc says it runs without services.
#[derive(Debug, Clone)]
struct Shown {
    place: String,
    text: String,
    offline: bool,
}

/// The shell commands of one Markdown text: every line of a `sh`/`bash`/`shell`/`console`
/// block (continuation lines joined, comment lines left out), every inline code span that
/// starts with `outbox ` or `outbox-bench `, and every inline span that starts with a `--flag`
/// (whose command only the file's context tells).
fn shown_commands(file: &str, text: &str) -> Vec<Shown> {
    let mut out = Vec::new();
    let mut fence: Option<(bool, bool)> = None; // (shell, offline)
                                                // A line continued with `\`, and the lines of the paragraph being read (a code span may go
                                                // on to the next line).
    let mut pending: Option<(usize, String)> = None;
    let mut paragraph: Vec<(usize, String)> = Vec::new();
    let flush = |paragraph: &mut Vec<(usize, String)>, out: &mut Vec<Shown>| {
        let mut text = String::new();
        let mut starts = Vec::new(); // (offset in `text`, line number)
        for (line, part) in paragraph.drain(..) {
            if !text.is_empty() {
                text.push(' ');
            }
            starts.push((text.len(), line));
            text.push_str(&part);
        }
        let mut offset = 0;
        for (i, piece) in text.split('`').enumerate() {
            // A `|` in a table cell is written `\|`.
            let span = piece.replace("\\|", "|");
            let first = span.split_whitespace().next().unwrap_or("");
            let command = matches!(first, "outbox" | "outbox-bench") && span.contains(' ');
            if i % 2 == 1 && (command || first.starts_with("--")) {
                let line = starts
                    .iter()
                    .rev()
                    .find(|(start, _)| *start <= offset)
                    .map_or(0, |(_, line)| *line);
                out.push(Shown {
                    place: format!("{file}:{line}"),
                    text: span.trim().to_string(),
                    offline: false,
                });
            }
            offset += piece.len() + 1;
        }
    };
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if let Some(info) = line.trim_start().strip_prefix("```") {
            flush(&mut paragraph, &mut out);
            fence = match fence {
                Some(_) => None,
                None => {
                    let mut words = info.split_whitespace();
                    let lang = words.next().unwrap_or("");
                    let shell = matches!(lang, "sh" | "bash" | "shell" | "console");
                    Some((shell, shell && words.any(|w| w == "offline")))
                }
            };
            continue;
        }
        match fence {
            Some((true, offline)) => {
                let line = line.strip_prefix("$ ").unwrap_or(line);
                let (start, joined) = match pending.take() {
                    Some((start, before)) => (start, format!("{before} {}", line.trim())),
                    None => (n, line.trim().to_string()),
                };
                if let Some(head) = joined.strip_suffix('\\') {
                    pending = Some((start, head.trim_end().to_string()));
                } else if !joined.is_empty() && !joined.starts_with('#') {
                    out.push(Shown {
                        place: format!("{file}:{start}"),
                        text: joined,
                        offline,
                    });
                }
            }
            Some((false, _)) => {}
            None if line.trim().is_empty() => flush(&mut paragraph, &mut out),
            None => paragraph.push((n, line.trim().to_string())),
        }
    }
    flush(&mut paragraph, &mut out);
    out
}

/// Shell words of a command line: quotes and backslashes as `sh` reads them, up to a comment.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            '#' if !in_word => break,
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// What one `--help` lists: subcommands and option names (`--json`, `-h`).
#[derive(Debug, Default)]
struct Help {
    subcommands: BTreeSet<String>,
    flags: BTreeSet<String>,
}

/// Parse clap's help text: the names under `Commands:`, the option names under `Options:`.
fn parse_help(text: &str) -> Help {
    let mut help = Help::default();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') && line.ends_with(':') {
            section = line.trim_end_matches(':');
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        match section {
            "Commands" if indent == 2 => {
                if let Some(name) = trimmed.split_whitespace().next() {
                    help.subcommands
                        .insert(name.trim_end_matches(',').to_string());
                }
            }
            "Options" if indent <= 6 && trimmed.starts_with('-') => {
                for token in trimmed.split_whitespace() {
                    let name = token.trim_end_matches(',');
                    let name = name.split(['=', '[', '<']).next().unwrap_or("");
                    if !name.starts_with('-') {
                        break;
                    }
                    help.flags.insert(name.to_string());
                }
            }
            _ => {}
        }
    }
    help
}

/// The binaries whose help the checks read, and each subcommand path's help, read once.
struct Helps {
    bins: HashMap<&'static str, PathBuf>,
    cache: HashMap<(String, Vec<String>), Help>,
}

impl Helps {
    fn new() -> Self {
        let bins = HashMap::from([
            ("outbox", PathBuf::from(env!("CARGO_BIN_EXE_outbox"))),
            (
                "outbox-bench",
                PathBuf::from(env!("CARGO_BIN_EXE_outbox-bench")),
            ),
        ]);
        Helps {
            bins,
            cache: HashMap::new(),
        }
    }

    fn get(&mut self, bin: &str, path: &[String]) -> &Help {
        let key = (bin.to_string(), path.to_vec());
        if !self.cache.contains_key(&key) {
            let out = Command::new(&self.bins[bin])
                .args(path)
                .arg("--help")
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "`{bin} {} --help` failed: {}",
                path.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            let help = parse_help(&String::from_utf8_lossy(&out.stdout));
            self.cache.insert(key.clone(), help);
        }
        &self.cache[&key]
    }
}

/// Check one shown command against the binaries: `Err` says what the doc names that is not
/// there.
fn check_command(text: &str, helps: &mut Helps) -> Result<(), String> {
    let words = shell_words(text);
    let mut words = words
        .iter()
        .map(String::as_str)
        .skip_while(|w| is_env_assignment(w));
    let Some(first) = words.next() else {
        return Ok(());
    };
    let bin = match first {
        "outbox" => "outbox",
        "outbox-bench" => "outbox-bench",
        script if script.starts_with("scripts/") => {
            if !repo_root().join(script).is_file() {
                return Err(format!("`{script}` is not a file of the repository"));
            }
            if script != "scripts/bench.sh" {
                return Ok(());
            }
            "outbox-bench"
        }
        _ => return Ok(()),
    };
    // Every subcommand path the words name (`list|replay` names two).
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    let mut rest: Vec<&str> = Vec::new();
    let mut words = words.peekable();
    while let Some(&word) = words.peek() {
        let word = word.trim_matches(['[', ']']);
        if word.is_empty() || word.starts_with('-') {
            break;
        }
        let subcommands = &helps.get(bin, &paths[0]).subcommands;
        if subcommands.is_empty() {
            break; // a positional argument
        }
        let mut next = Vec::new();
        for path in &paths {
            let known = helps.get(bin, path).subcommands.clone();
            for alternative in word.split('|') {
                if !known.contains(alternative) {
                    return Err(format!(
                        "`{bin} {}` has no subcommand `{alternative}` (it has: {})",
                        path.join(" "),
                        known.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
                let mut longer = path.clone();
                longer.push(alternative.to_string());
                next.push(longer);
            }
        }
        paths = next;
        words.next();
    }
    let mut previous = "";
    for word in words {
        // A `|` between alternatives (`[--a | --b]`) is not a pipe; one before a command is.
        if matches!(word, "&&" | ";" | "||") || (previous == "|" && !word.starts_with(['-', '['])) {
            break;
        }
        if word == "--" {
            break;
        }
        previous = word;
        rest.extend(word.trim_matches(['[', ']']).split('|'));
    }
    for word in rest {
        let flag = word.split('=').next().unwrap_or("");
        let long = flag.starts_with("--") && flag.len() > 2;
        let short =
            flag.len() == 2 && flag.starts_with('-') && flag[1..].chars().all(char::is_alphabetic);
        let is_flag = long || short;
        if !is_flag {
            continue;
        }
        let known = paths
            .iter()
            .any(|path| helps.get(bin, path).flags.contains(flag));
        if !known {
            let path = &paths[0];
            return Err(format!(
                "`{bin}{}{}` has no option `{flag}` (it has: {})",
                if path.is_empty() { "" } else { " " },
                path.join(" "),
                helps
                    .get(bin, path)
                    .flags
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

fn is_env_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// Every command of every doc file.
fn all_shown() -> Vec<Shown> {
    let root = repo_root();
    let mut shown = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(root.join(&file)).unwrap();
        shown.extend(shown_commands(&file, &text));
    }
    shown
}

#[test]
fn every_command_the_docs_show_names_subcommands_and_flags_that_exist() {
    let mut shown = all_shown();
    // bench/README.md's bare flags (`--events` (100,000)) are all `outbox-bench`'s; elsewhere
    // a bare flag's command is told by the prose around it, which no check reads.
    shown.retain_mut(|s| {
        if !s.text.starts_with("--") {
            return true;
        }
        s.text = format!("outbox-bench {}", s.text);
        s.place.starts_with("bench/README.md:")
    });
    let mut helps = Helps::new();
    let mut failures = Vec::new();
    let mut checked = 0;
    for command in &shown {
        let first = shell_words(&command.text)
            .into_iter()
            .find(|w| !is_env_assignment(w))
            .unwrap_or_default();
        if first == "outbox" || first == "outbox-bench" || first.starts_with("scripts/") {
            checked += 1;
        }
        if let Err(why) = check_command(&command.text, &mut helps) {
            failures.push(format!("{}: `{}`: {why}", command.place, command.text));
        }
    }
    println!("{checked} commands checked");
    // A parser that silently found nothing would pass: the docs show well over a hundred.
    assert!(checked >= 100, "only {checked} commands found in the docs");
    assert!(
        failures.is_empty(),
        "commands in the docs that the binaries do not have:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_checks_catch_a_made_up_subcommand_or_flag() {
    let mut helps = Helps::new();
    for good in [
        "outbox --help",
        "outbox stats [--json]",
        "outbox dead-letter replay|drop [--queue Q] [--dry-run]",
        "outbox run --queue-group mail [--dispatcher-only | --receivers-only]",
        "outbox run 2>&1 | head -n 3",
        "OUTBOX_CHAOS_SEED=1 scripts/chaos.sh",
        "scripts/bench.sh --only dispatch,e2e --e2e-events 5000",
        "outbox publish mail.welcome --payload '{\"user\": 42}' --dispatch-key=k",
    ] {
        assert_eq!(check_command(good, &mut helps), Ok(()), "{good}");
    }
    for bad in [
        "outbox stats --made-up",
        "outbox stats [--made-up]",
        "outbox made-up",
        "outbox dead-letter replay|made-up",
        "outbox queue pause outbox.mail --made-up why",
        "outbox run [--dispatcher-only | --made-up]",
        "outbox-bench --made-up 3",
        "scripts/bench.sh --only dispatch --made-up",
        "scripts/made-up.sh",
    ] {
        assert!(check_command(bad, &mut helps).is_err(), "{bad} passed");
    }
    let doc = "Run `outbox stats --made-up` or\n`outbox queue\nlist --json` and:\n\n```sh\n\
               outbox trace 1 \\\n  --made-up # comment\n# only a comment\n```\n";
    let shown: Vec<String> = shown_commands("doc.md", doc)
        .into_iter()
        .map(|s| format!("{} {}", s.place, s.text))
        .collect();
    assert_eq!(
        shown,
        [
            "doc.md:1 outbox stats --made-up",
            "doc.md:2 outbox queue list --json",
            "doc.md:6 outbox trace 1 --made-up # comment",
        ]
    );
}

#[test]
fn the_offline_examples_run_without_services() {
    let offline: Vec<Shown> = all_shown().into_iter().filter(|s| s.offline).collect();
    assert!(
        offline.len() >= 3,
        "only {} offline examples found (blocks marked `sh offline`)",
        offline.len()
    );
    let root = repo_root();
    let scratch = tempfile::tempdir().unwrap();
    let bin = scratch.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_outbox"), bin.join("outbox")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_outbox-bench"), bin.join("outbox-bench"))
        .unwrap();
    let work = scratch.path().join("work");
    std::fs::create_dir(&work).unwrap();
    for shared in ["routes.toml", "contracts", "plugins"] {
        std::os::unix::fs::symlink(root.join(shared), work.join(shared)).unwrap();
    }
    let mut failures = Vec::new();
    for example in &offline {
        let out = Command::new("sh")
            .arg("-c")
            .arg(&example.text)
            .current_dir(&work)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("HOME", scratch.path())
            .env("RUST_LOG", "warn")
            // Out of reach: an example that needs them fails.
            .env("DATABASE_URL", "postgres://postgres@127.0.0.1:9/none")
            .env("REDIS_URL", "redis://127.0.0.1:9/")
            .output()
            .unwrap();
        if !out.status.success() {
            failures.push(format!(
                "{}: `{}` exited {}:\n{}{}",
                example.place,
                example.text,
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "offline examples that fail:\n\n{}",
        failures.join("\n\n")
    );
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        } else if !fence && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            if heading.starts_with(' ') {
                out.insert(anchor(heading));
            }
        }
    }
    out
}

/// The `(target)` of every `[text](target)` outside code blocks and code spans, with its line.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut fence = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        for (i, outside) in line.split('`').enumerate() {
            if i % 2 == 1 {
                continue;
            }
            let mut rest = outside;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(end) = after.find(')') else { break };
                out.push((n + 1, after[..end].to_string()));
                rest = &after[end..];
            }
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root();
    let mut failures = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let path = root.join(&file);
        let text = std::fs::read_to_string(&path).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file_part, fragment) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if file_part.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file_part)
            };
            if !resolved.exists() {
                failures.push(format!("{file}:{line}: `{target}`: no such file"));
                continue;
            }
            if let Some(fragment) = fragment {
                let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&target_text).contains(fragment) {
                    failures.push(format!(
                        "{file}:{line}: `{target}`: no heading with that anchor"
                    ));
                }
            }
        }
    }
    assert!(checked >= 30, "only {checked} relative links found");
    assert!(
        failures.is_empty(),
        "links that do not resolve:\n{}",
        failures.join("\n")
    );
}

#[test]
fn the_readme_shows_the_test_command_ci_runs() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    for command in ["scripts/test.sh", "scripts/demo.sh"] {
        assert!(
            readme.contains(&format!("```sh\n{command}\n```")),
            "README.md no longer shows `{command}` in a block of its own"
        );
    }
}
