//! The command line without root: bad input is refused with a message that names it, never a
//! panic. (Also makes `cargo test` build the `dataplane` binary that the end-to-end tests in
//! the top-level `tests/` run.)
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_dataplane");

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run dataplane");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_missing_config_is_named() {
    let (rc, _, err) = run(&[
        "plan",
        "--config",
        "/nonexistent/dp.toml",
        "--layout",
        "irq-core",
        "--synthetic",
        "pack:1 core:2 pu:1",
    ]);
    assert_eq!(rc, 1, "{err}");
    assert!(
        err.contains("dataplane: error: cannot read config /nonexistent/dp.toml"),
        "{err}"
    );
}

#[test]
fn an_unknown_layout_lists_the_known_ones() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/l3fwd-testbed.toml");
    let (rc, _, err) = run(&["plan", "--config", cfg, "--layout", "diagonal"]);
    assert_eq!(rc, 1, "{err}");
    assert!(err.contains("--layout diagonal: one of irq-core"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_synthetic_machine_is_planned() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/l3fwd-2queues-testbed.toml"
    );
    let (rc, out, err) = run(&[
        "plan",
        "--config",
        cfg,
        "--layout",
        "same-package",
        "--irq-cpu",
        "0:0",
        "--irq-cpu",
        "1:2",
        "--synthetic",
        "pack:2 [numa] core:4 pu:2",
    ]);
    assert_eq!(rc, 0, "{err}");
    assert!(out.starts_with("layout same-package"), "{out}");
    assert!(out.contains("dp-d1"), "{out}");
}

#[test]
fn bash_completion_loads() {
    let (rc, script, err) = run(&["completions", "bash"]);
    assert_eq!(rc, 0, "{err}");
    let out = Command::new("bash")
        .args(["-c", "source /dev/stdin && complete -p dataplane"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(script.as_bytes())?;
            c.wait_with_output()
        })
        .expect("bash");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "bash could not load the script");
    assert!(text.contains("dataplane"), "{text}");
}

#[test]
fn man_pages_render() {
    let dir = std::env::temp_dir().join(format!("dp-man-{}", std::process::id()));
    let (rc, out, err) = run(&["manpages", dir.to_str().expect("utf-8 path")]);
    assert_eq!(rc, 0, "{err}");
    let pages: Vec<&str> = out.lines().collect();
    assert!(pages.iter().any(|p| p.ends_with("/dataplane.1")), "{out}");
    assert!(
        pages.iter().any(|p| p.ends_with("/dataplane-run.1")),
        "{out}"
    );
    let man = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(dir.join("dataplane-run.1"))
        .env("MANWIDTH", "100")
        .output()
        .expect("man (Debian man-db)");
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(
        man.status.success(),
        "{}",
        String::from_utf8_lossy(&man.stderr)
    );
    assert!(text.contains("--apply-irq"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every `dataplane <command> ...` line in the code blocks of the README and docs/ names a
/// command the binary has, and every `--option` on it is one that command takes (checked
/// against its `--help`): the docs cannot drift from the command line unnoticed.
#[test]
fn the_docs_command_examples_parse() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut helps: std::collections::HashMap<Vec<String>, String> = Default::default();
    let mut help = |path: &[String]| -> String {
        helps
            .entry(path.to_vec())
            .or_insert_with(|| {
                let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
                args.push("--help");
                let (rc, out, err) = run(&args);
                assert_eq!(rc, 0, "dataplane {}: {err}", args.join(" "));
                out
            })
            .clone()
    };
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let mut in_code = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                continue;
            }
            if !in_code {
                continue;
            }
            // The command itself: what follows `dataplane` (or target/release/dataplane), up to
            // a comment, a pipe or a redirection.
            let cmd = line.split(" #").next().unwrap_or("");
            let words: Vec<&str> = cmd.split_whitespace().collect();
            let Some(at) = words
                .iter()
                .position(|w| *w == "dataplane" || w.ends_with("/dataplane"))
            else {
                continue;
            };
            let rest: Vec<&str> = words[at + 1..]
                .iter()
                .take_while(|w| !matches!(**w, ">" | "2>" | "|" | "&&" | ";" | ">>"))
                .copied()
                .collect();
            let Some(sub) = rest
                .first()
                .filter(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
            else {
                continue;
            };
            let mut path = vec![sub.to_string()];
            let mut h = help(&path);
            if h.contains("\nCommands:") {
                if let Some(next) = rest
                    .get(1)
                    .filter(|w| !w.starts_with('-') && !w.contains('|'))
                {
                    path.push(next.to_string());
                    h = help(&path);
                }
            }
            for w in &rest {
                let opt = w.trim_matches(|c| c == '[' || c == ']' || c == '|');
                let opt = opt.split('=').next().unwrap_or(opt);
                if opt.starts_with("--") && opt.len() > 2 {
                    assert!(
                        h.contains(&format!("{opt} ")) || h.contains(&format!("{opt}\n")),
                        "{}: `{}`: dataplane {} has no {opt}",
                        f.display(),
                        line.trim(),
                        path.join(" ")
                    );
                }
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 12,
        "only {checked} command lines found in the docs"
    );
}

/// Every netns test builds its testbed under a name prefix no other test uses, so tests run
/// side by side (and a crashed one's leftovers never meet another's).
#[test]
fn every_netns_test_has_its_own_testbed_prefix() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests");
    let mut seen: std::collections::BTreeMap<String, String> = Default::default();
    for e in std::fs::read_dir(&dir).expect("tests/") {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("read");
        for (n, line) in text.lines().enumerate() {
            let Some(rest) = line.split("Bed::up(\"").nth(1) else {
                continue;
            };
            let prefix = rest.split('"').next().unwrap_or("").to_string();
            let here = format!("{}:{}", p.display(), n + 1);
            if let Some(first) = seen.insert(prefix.clone(), here.clone()) {
                panic!("testbed prefix {prefix} used twice: {first} and {here}");
            }
        }
    }
    assert!(seen.len() >= 30, "only {} testbeds found", seen.len());
}
