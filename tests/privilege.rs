//! Least privilege: `dataplane run` as an unprivileged user given only the documented
//! capabilities (docs/OPERATIONS.md) forwards, and once set up every thread holds only what
//! the rest of the run needs. They need root (to create the testbed and hand out capabilities).
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::router::{config, kernel_config, marked, spec};
use common::*;
use dataplane::packet::build::udp_v4;

/// (thread name, CapEff, NoNewPrivs, CapPrm) of every thread of `pid`; the main thread (its
/// id is the pid) is named `main`: helper threads inherit its name `dataplane`.
fn thread_privileges(pid: u32) -> Vec<(String, u64, String, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
    {
        let status = std::fs::read_to_string(e.path().join("status")).expect("status");
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
                .expect("field")
        };
        let main = e.file_name().to_str() == Some(&pid.to_string());
        out.push((
            if main {
                "main".to_string()
            } else {
                field("Name:")
            },
            u64::from_str_radix(&field("CapEff:"), 16).expect("hex"),
            field("NoNewPrivs:"),
            u64::from_str_radix(&field("CapPrm:"), 16).expect("hex"),
        ));
    }
    out.sort();
    out
}

const CAP_BPF: u64 = 1 << 39;
const CAP_NET_ADMIN: u64 = 1 << 12;
const CAP_NET_RAW: u64 = 1 << 13;
const CAP_SYS_NICE: u64 = 1 << 23;

/// `setpriv` as user nobody with the documented set for `dataplane run`
/// (docs/OPERATIONS.md), as a systemd unit's AmbientCapabilities would give it.
fn unprivileged() -> Vec<String> {
    let caps = "-all,+net_admin,+net_raw,+bpf,+ipc_lock";
    [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps={caps}"),
        &format!("--ambient-caps={caps}"),
    ]
    .map(String::from)
    .to_vec()
}

/// Every thread of `pid` holds what the rest of the run needs and nothing more; the control
/// thread holds `control` (nothing with static routes, CAP_NET_ADMIN with the kernel's).
fn assert_least_privilege(pid: u32, control: u64) {
    assert_least_privilege_with(pid, control, 0);
}

/// As [`assert_least_privilege`], the main thread holding `main` besides CAP_BPF.
fn assert_least_privilege_with(pid: u32, control: u64, main: u64) {
    let threads = thread_privileges(pid);
    // The threads whose sets matter most are there to be checked: a run whose pollers or
    // control thread had not started (or were renamed) would pass the loop below vacuously.
    assert!(
        threads.iter().any(|(name, ..)| name.starts_with("dp-poll"))
            && threads.iter().any(|(name, ..)| name == "dp-control"),
        "a poller and the control thread: {threads:?}"
    );
    for (name, eff, nnp, prm) in &threads {
        assert_eq!(nnp, "1", "{name}: no-new-privs");
        // Pollers keep nothing; the control thread `control`; the rest CAP_BPF.
        let want = if name.starts_with("dp-poll") {
            0
        } else if name == "dp-control" {
            control
        } else if name == "main" {
            CAP_BPF | main
        } else {
            CAP_BPF
        };
        assert_eq!(
            *eff, want,
            "{name}: CapEff {eff:#x} (all threads: {threads:?})"
        );
        // Permitted, not in force: a poller's CAP_NET_RAW (to bind a socket on a recreated
        // interface) and the main thread's CAP_NET_ADMIN (to attach its steering program
        // there), each raised for that call only; the metrics endpoint's threads, and the one
        // that started it (named `dataplane` as the main thread; it may still be exiting),
        // hold none.
        let spare = if name.starts_with("dp-poll") {
            CAP_NET_RAW
        } else if name == "main" {
            CAP_NET_ADMIN
        } else {
            0
        };
        assert_eq!(
            *prm,
            want | spare,
            "{name}: CapPrm {prm:#x} (all threads: {threads:?})"
        );
    }
}

#[test]
fn runs_unprivileged_with_the_documented_capabilities_and_keeps_only_cap_bpf() {
    if !root_or_skip("least privilege") {
        return;
    }
    let bed = Bed::up("tlp", 1);
    let t = &bed.0;
    let wrapper = unprivileged();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let dut = Dut::start_wrapped(&bed, &config(t, ""), &wrapper, &["--metrics", "9914"]);
    assert_least_privilege(dut.pid(), 0);
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for i in 0..50u16 {
        gen.send(&udp_v4(&spec(i))).expect("send");
    }
    let got = marked(&capture(
        &sink,
        Duration::from_millis(600),
        Duration::from_secs(5),
    ));
    assert_eq!(got, (0..50).map(|i| (false, i)).collect::<BTreeSet<_>>());
    let s = dut.stop();
    assert_eq!(
        s["steer"][0][1][0], 50,
        "the steering counters are still readable: {s}"
    );
    assert_frames_accounted(&s);
}

#[test]
fn too_few_capabilities_are_refused_by_name() {
    if !root_or_skip("missing capabilities") {
        return;
    }
    let bed = Bed::up("tlq", 1);
    let t = &bed.0;
    let p = std::env::temp_dir().join("tlq-dut.toml");
    std::fs::write(&p, config(t, "")).expect("config");
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.dut_ns(),
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
        ])
        .args([
            "--clear-groups",
            "--inh-caps=-all,+net_raw",
            "--ambient-caps=-all,+net_raw",
        ])
        .args([&bin(), "run", "--duration", "1", "--config"])
        .arg(&p)
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("missing: CAP_NET_ADMIN, CAP_BPF, CAP_IPC_LOCK"),
        "{err}"
    );
    assert!(!has_xdp(&t.dut_ns(), &t.dut_in()), "nothing attached");
}

#[test]
fn the_summary_is_never_written_through_a_symlink() {
    if !root_or_skip("json symlink") {
        return;
    }
    let bed = Bed::up("tsl", 1);
    let t = &bed.0;
    let dir = std::env::temp_dir();
    let target = dir.join("tsl-target");
    let link = dir.join("tsl-link.json");
    std::fs::write(&target, "keep me").expect("target");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let (ok, err) = run_once(
        &bed,
        "symlink",
        &config(t, ""),
        &["--json", link.to_str().expect("utf-8")],
    );
    assert!(!ok, "writing through a symlink must fail");
    assert!(err.contains("a symlink is refused"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_file(&target);
}

#[test]
fn with_kernel_routes_the_control_thread_alone_keeps_cap_net_admin() {
    if !root_or_skip("least privilege, kernel routes") {
        return;
    }
    let bed = Bed::up("tlk", 1);
    let t = &bed.0;
    let wrapper = unprivileged();
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let dut = Dut::start_wrapped(&bed, &kernel_config(t), &wrapper, &[]);
    // The control thread asks the kernel to resolve neighbours (RTM_NEWNEIGH): CAP_NET_ADMIN.
    assert_least_privilege(dut.pid(), CAP_NET_ADMIN);
    // And it can: a destination whose neighbour the kernel does not know yet is resolved
    // (the sink answers ARP) and then forwarded.
    let out = common::router::ns(
        &t.dut_ns(),
        &[
            "ip",
            "neigh",
            "del",
            dataplane::testbed::SINK_V4,
            "dev",
            &t.dut_out(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let sink = packet_socket(&t.sink_ns(), &t.sink_if());
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut got = BTreeSet::new();
    let mut i = 0u16;
    while got.is_empty() && std::time::Instant::now() < deadline {
        gen.send(&udp_v4(&spec(i))).expect("send");
        i += 1;
        got = marked(&capture(
            &sink,
            Duration::from_millis(100),
            Duration::from_millis(200),
        ));
    }
    assert!(!got.is_empty(), "resolved and forwarded");
    let s = dut.stop();
    assert!(
        s["control"]["resolve_requests"].as_u64().expect("count") >= 1,
        "{}",
        s["control"]
    );
}

#[test]
fn with_apply_irq_the_main_thread_keeps_only_what_putting_interrupts_back_needs() {
    if !root_or_skip("least privilege, --apply-irq") {
        return;
    }
    let bed = Bed::up("tli", 1);
    let t = &bed.0;
    let state = std::env::temp_dir().join("tli-irq.json");
    let _ = std::fs::remove_file(&state);
    let state_arg = state.to_str().expect("utf-8").to_string();
    // As root: writing the `threaded` switch and the journal takes file permissions that the
    // documented set alone does not give user nobody. The drop after setup is the same.
    let dut = Dut::start_with(&bed, &config(t, ""), &irq_core_args(&state_arg));
    assert!(state.exists(), "the interrupt changes are journaled");
    // The main thread restores the interrupts at stop: CAP_NET_ADMIN (threaded NAPI) and
    // CAP_SYS_NICE (kernel threads' affinity), besides CAP_BPF; the pollers nothing.
    assert_least_privilege_with(dut.pid(), 0, CAP_NET_ADMIN | CAP_SYS_NICE);
    let s = dut.stop();
    assert!(
        !state.exists(),
        "a clean stop put everything back and removed the journal: {s}"
    );
}
