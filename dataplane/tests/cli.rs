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
