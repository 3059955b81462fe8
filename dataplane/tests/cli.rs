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
