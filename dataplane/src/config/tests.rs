//! The config's unit tests: the examples parse, every bad value is refused with its key.
use super::*;
use crate::fib::Miss;
use crate::types::parse_mac;
use routes::parse_prefix;

const GOOD: &str = r#"
[dataplane]
mode = "l3fwd"

[[interfaces]]
name = "in0"
[[interfaces]]
name = "out0"

[[pollers]]
cpu = 0
queues = [0]

[[routes]]
prefix = "198.19.0.0/16"
via = "198.19.0.1"
dev = "out0"
[[routes]]
prefix = "198.18.0.0/24"
dev = "in0"
[[routes]]
prefix = "2001:2:0:1::/64"
via = "2001:2:0:1::1"
dev = "out0"
[[routes]]
prefix = "10.0.0.0/8"
via = "198.19.0.99"
dev = "out0"

[[neighbours]]
ip = "198.19.0.1"
mac = "02:00:00:00:01:01"
dev = "out0"
[[neighbours]]
ip = "198.18.0.1"
mac = "02:00:00:00:00:01"
dev = "in0"
[[neighbours]]
ip = "2001:2:0:1::1"
mac = "02:00:00:00:01:01"
dev = "out0"
"#;

#[test]
fn good_config_builds_a_table() {
    let c = Config::parse(GOOD, "t").expect("valid");
    assert_eq!(c.dataplane.batch_size, 64);
    let mut rib = crate::runtime::build_rib(&c).expect("table");
    rib.writer().set_port(0, 1500, true);
    rib.writer().set_port(1, 1500, true);
    let t = rib.table();
    let h = t.route_v4(0xc613_0505, || 0).expect("routed");
    assert_eq!(
        (h.port, h.mac_bytes(), h.mtu),
        (1, [2, 0, 0, 0, 1, 1], 1500)
    );
    let h = t
        .route_v4(0xc612_0001, || 0)
        .expect("neighbour on a connected route");
    assert_eq!((h.port, h.mac_bytes()[5]), (0, 1));
    assert_eq!(
        t.route_v4(0xc612_0005, || 0),
        Err(Miss::Failed),
        "connected, no (static) neighbour"
    );
    assert_eq!(
        t.route_v4(0x0a00_0001, || 0),
        Err(Miss::Failed),
        "via without neighbour"
    );
    assert_eq!(t.route_v4(0x0808_0808, || 0), Err(Miss::NoRoute));
    assert!(t
        .route_v6(0x2001_0002_0000_0001_0000_0000_0000_0009, || 0)
        .is_ok());
}

fn err(text: &str) -> String {
    Config::parse(text, "t")
        .expect_err("must be refused")
        .to_string()
}

#[test]
fn bad_configs_name_the_key_and_value() {
    let e = err(&GOOD.replace("mode = \"l3fwd\"", "mode = \"l3fwd\"\nring_sz = 4"));
    assert!(e.contains("ring_sz"), "{e}");
    let e = err(&GOOD.replace("mode = \"l3fwd\"", "mode = \"l3fwd\"\nring_size = 1000"));
    assert!(
        e.contains("dataplane.ring_size") && e.contains("1000"),
        "{e}"
    );
    let e = err(&GOOD.replace("mode = \"l3fwd\"", "mode = \"fast\""));
    assert!(e.contains("fast"), "{e}");
    let e = err(&GOOD.replace("via = \"198.19.0.1\"", "via = \"198.19.0\""));
    assert!(e.contains("routes[0].via") && e.contains("198.19.0"), "{e}");
    let e = err(&GOOD.replace("198.19.0.0/16", "198.19.0.0/33"));
    assert!(e.contains("routes[0].prefix"), "{e}");
    let e = err(&GOOD.replace("dev = \"out0\"\n[[routes]]", "dev = \"eth9\"\n[[routes]]"));
    assert!(e.contains("routes[0].dev") && e.contains("eth9"), "{e}");
    let e = err(&GOOD.replace("02:00:00:00:01:01", "02:00:00:00:01"));
    assert!(e.contains("neighbours[0].mac"), "{e}");
    let e = err(&GOOD.replace("cpu = 0", "cpu = 4096"));
    assert!(e.contains("pollers[0].cpu") && e.contains("4096"), "{e}");
    let e = err(&GOOD.replace(
        "mode = \"l3fwd\"",
        "mode = \"l3fwd\"\nalign = \"offset:64\"",
    ));
    assert!(
        e.contains("dataplane.align") && e.contains("offset:64"),
        "{e}"
    );
    let e = err(&GOOD.replace(
        "mode = \"l3fwd\"",
        "mode = \"l3fwd\"\nsocket_mode = \"fast\"",
    ));
    assert!(e.contains("socket_mode") || e.contains("fast"), "{e}");
    for m in ["auto", "copy", "zerocopy"] {
        let c = Config::parse(
            &GOOD.replace(
                "mode = \"l3fwd\"",
                &format!("mode = \"l3fwd\"\nsocket_mode = \"{m}\""),
            ),
            "t",
        )
        .expect("socket_mode");
        assert_eq!(c.dataplane.socket_mode.name(), m);
    }
    let e = err(&GOOD.replace("mode = \"l3fwd\"", "mode = \"l3fwd\"\nmemory = \"far\""));
    assert!(e.contains("far"), "{e}");
    let e = err(&GOOD.replace("mode = \"l3fwd\"", "mode = \"l3fwd\"\nbatch_size = 0"));
    assert!(e.contains("batch_size"), "{e}");
    let e = err(&GOOD.replace("2001:2:0:1::1\"\ndev", "198.19.0.1\"\ndev"));
    assert!(e.contains("routes[2].via") && e.contains("family"), "{e}");
}

#[test]
fn a_million_prefixes_load_from_a_routes_file() {
    use rand::{Rng, SeedableRng};
    let dir = std::env::temp_dir().join(format!("dp-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut text = String::with_capacity(40 << 20);
    for _ in 0..1_000_000 {
        let a: u32 = rng.gen();
        text.push_str(&format!(
            "{}/24 via 198.19.0.1 dev out0\n",
            std::net::Ipv4Addr::from(a & 0xffff_ff00)
        ));
    }
    text.push_str("# comment\n\n203.0.113.0/24 dev in0 # connected\n");
    std::fs::write(dir.join("big.routes"), &text).expect("write");
    let toml = GOOD.replace(
        "mode = \"l3fwd\"",
        "mode = \"l3fwd\"\nroutes_file = \"big.routes\"",
    );
    let c = Config::parse_in(&toml, "t", Some(&dir)).expect("valid");
    assert_eq!(c.routes.len(), 4 + 1_000_001);
    let mut rib = crate::runtime::build_rib(&c).expect("table");
    rib.writer().set_port(0, 1500, true);
    rib.writer().set_port(1, 1500, true);
    // A million random /24s out of 2^24 hold about 3 % duplicates: count the distinct ones.
    let distinct: std::collections::HashSet<_> =
        c.routes.iter().map(|r| (r.prefix, r.len)).collect();
    assert_eq!(rib.routes().count(), distinct.len());
    // Plus one host route: the static neighbour on the connected 198.18.0.0/24.
    assert_eq!(rib.size().v4 + rib.size().v6, distinct.len() + 1);
    assert_eq!(rib.table().route_v4(0xcb00_7105, || 0), Err(Miss::Failed));
    std::fs::write(dir.join("bad.routes"), "10.0.0.0/8 via 10.0.0.1\n").expect("write");
    let e = Config::parse_in(&toml.replace("big.routes", "bad.routes"), "t", Some(&dir))
        .expect_err("refused")
        .to_string();
    assert!(e.contains("bad.routes:1") && e.contains("dev"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mac_and_prefix_parsing() {
    assert_eq!(parse_mac("02:00:0a:ff:00:01"), Some([2, 0, 10, 255, 0, 1]));
    assert_eq!(parse_mac("02:00:0a:ff:00"), None);
    assert_eq!(parse_mac("02:00:0a:ff:00:01:02"), None);
    assert_eq!(parse_prefix("::/0"), Some(("::".parse().expect("lit"), 0)));
    assert_eq!(
        parse_prefix("1.2.3.4"),
        Some(("1.2.3.4".parse().expect("lit"), 32))
    );
    assert_eq!(parse_prefix("1.2.3.4/40"), None);
}

#[test]
fn every_example_in_config_dir_is_valid() {
    // Whole, CPUs included, on the machine the examples are written for (two sockets of
    // four cores with two threads each: a synthetic hwloc topology), not on this one, where
    // their CPU numbers may not exist.
    let machine = crate::placement::topology::Machine::load(
        &crate::placement::topology::Source::Synthetic("package:2 core:4 pu:2".into()),
    )
    .expect("synthetic topology");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../config");
    let mut n = 0;
    // config/ and its subdirectories (config/fleet/).
    let mut paths = Vec::new();
    for e in std::fs::read_dir(&dir).expect("config/ exists") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            for e in std::fs::read_dir(&p).expect("readable") {
                paths.push(e.expect("entry").path());
            }
        } else {
            paths.push(p);
        }
    }
    for p in paths {
        if p.extension().is_some_and(|x| x == "toml") {
            let cfg = Config::parse_for(
                &std::fs::read_to_string(&p).expect("read"),
                &p.display().to_string(),
                Some(&dir),
                machine.pus.len(),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            for (i, poller) in cfg.pollers.iter().enumerate() {
                if let Some(cpu) = poller.cpu {
                    assert!(
                        machine.pu(cpu).is_some(),
                        "{}: pollers[{i}].cpu = {cpu} is no CPU of the example machine",
                        p.display()
                    );
                }
            }
            n += 1;
        }
    }
    assert!(n >= 6, "expected the example configs, found {n}");
}

#[test]
fn a_cpu_this_machine_lacks_is_refused_by_key() {
    let text = GOOD.replace("cpu = 0", "cpu = 7");
    let e = Config::parse_for(&text, "t", None, 4).expect_err("cpu 7 of 4");
    assert!(
        matches!(&e, ConfigError::Invalid { key, .. } if key == "pollers[0].cpu"),
        "{e}"
    );
}

#[test]
fn an_oversized_routes_file_is_refused_before_it_is_read() {
    let dir = std::env::temp_dir().join(format!("dp-routes-limit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let f = std::fs::File::create(dir.join("big.routes")).expect("create");
    // Sparse: no disk, no time.
    f.set_len(ROUTES_FILE_MAX_BYTES + 1).expect("set_len");
    let text = GOOD.replace(
        "mode = \"l3fwd\"",
        "mode = \"l3fwd\"\nroutes_file = \"big.routes\"",
    );
    let e = Config::parse_in(&text, "t", Some(&dir))
        .expect_err("too big")
        .to_string();
    assert!(
        e.contains("dataplane.routes_file") && e.contains("bytes"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_routes_file_of_more_than_4m_lines_is_refused_and_4m_are_read() {
    let dir = std::env::temp_dir().join(format!("dp-routes-lines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let text = GOOD.replace(
        "mode = \"l3fwd\"",
        "mode = \"l3fwd\"\nroutes_file = \"many.routes\"",
    );
    // Comment lines: cheap to write and parse, and they count as lines.
    let at_limit = "#\n".repeat(ROUTES_FILE_MAX_LINES);
    std::fs::write(dir.join("many.routes"), &at_limit).expect("write");
    Config::parse_in(&text, "t", Some(&dir)).expect("4M lines are within the limit");
    std::fs::write(dir.join("many.routes"), format!("{at_limit}#\n")).expect("write");
    let e = Config::parse_in(&text, "t", Some(&dir))
        .expect_err("one line too many")
        .to_string();
    assert!(
        e.contains("dataplane.routes_file") && e.contains("more than 4000000 lines"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn more_interfaces_than_a_next_hop_can_name_are_refused() {
    let many: String = (0..=crate::fib::MAX_PORTS)
        .map(|i| format!("[[interfaces]]\nname = \"p{i}\"\n"))
        .collect();
    let text = GOOD.replace(
        "[[interfaces]]\nname = \"in0\"\n",
        &format!("[[interfaces]]\nname = \"in0\"\n{many}"),
    );
    let e = err(&text);
    assert!(
        e.contains("interfaces") && e.contains("at most 4096"),
        "{e}"
    );
}

#[test]
fn rebalance_is_off_by_default_and_its_bad_values_are_refused_by_key() {
    let c = Config::parse(GOOD, "t").expect("good");
    assert!(!c.rebalance.enabled);
    let on = format!("{GOOD}\n[rebalance]\nenabled = true\ntarget_load = 0.7\n");
    let c = Config::parse(&on, "t").expect("good");
    assert_eq!(c.rebalance.target_load, Some(0.7));
    assert_eq!(c.rebalance.period_ms, 1000);
    for (key, value, why) in [
        ("threshold", "0.0", "rebalance.threshold"),
        ("target_load", "1.5", "rebalance.target_load"),
        ("fast_period_ms", "5000", "rebalance.fast_period_ms"),
        ("period_ms", "50", "rebalance.period_ms"),
        ("max_moves", "0", "rebalance.max_moves"),
        ("min_gap", "-1.0", "rebalance.min_gap"),
        ("heavy", "0.0", "rebalance.heavy"),
    ] {
        let e = err(&format!("{on}{key} = {value}\n")
            .replace("target_load = 0.7\ntarget_load", "target_load"));
        assert!(
            e.contains(why) && e.contains(value.trim_end_matches(".0")),
            "{key}: {e}"
        );
    }
    let e = err(&format!("{on}speed = 3\n"));
    assert!(e.contains("speed"), "{e}");
    let generic = on.replace(
        "mode = \"l3fwd\"",
        "mode = \"l3fwd\"\nxdp_mode = \"generic\"",
    );
    let e = err(&generic);
    assert!(
        e.contains("rebalance.enabled") && e.contains("native"),
        "{e}"
    );
    let shared = on.replace("mode = \"l3fwd\"", "mode = \"l3fwd\"\nstats = \"shared\"");
    let e = err(&shared);
    assert!(
        e.contains("rebalance.enabled") && e.contains("percpu"),
        "{e}"
    );
}

#[test]
fn sub_interfaces_are_numbered_after_the_ports_and_refused_by_key() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/router.toml");
    let text = std::fs::read_to_string(path).unwrap();
    let c = Config::parse_for(&text, "router.toml", None, 8).unwrap();
    assert_eq!(c.subinterfaces.len(), 2);
    assert_eq!(c.interface_count(), 4);
    let (v, q) = (&c.subinterfaces[0], &c.subinterfaces[1]);
    assert_eq!((v.parent, q.parent), (0, 1));
    use crate::packet::vlan::{Tag, TagStack};
    assert_eq!(v.tags, TagStack::one(Tag::dot1q(100)));
    assert_eq!(q.tags, TagStack::two(Tag::dot1ad(200), Tag::dot1q(300)));
    assert_eq!(v.tags_text(), "802.1Q 100");
    assert_eq!(q.tags_text(), "802.1ad 200 over 802.1Q 300");
    assert!(
        c.routes.iter().any(|r| r.port == 2),
        "a route through eth1.100"
    );
    let bad = |from: &str, to: &str| {
        let t = text.replacen(from, to, 1);
        Config::parse_for(&t, "router.toml", None, 8)
            .unwrap_err()
            .to_string()
    };
    let e = bad("vlan = 100", "vlan = 4095");
    assert!(
        e.contains("subinterfaces[0].vlan") && e.contains("4095"),
        "{e}"
    );
    let e = bad("parent = \"eth1\"", "parent = \"eth9\"");
    assert!(
        e.contains("subinterfaces[0].parent") && e.contains("eth9"),
        "{e}"
    );
    let e = bad("name = \"eth2.200.300\"", "name = \"eth1.100\"");
    assert!(e.contains("subinterfaces[1].name"), "{e}");
    let e = bad("inner_vlan = 300", "inner_vlan = 300\nprotocol = \"qinq\"");
    assert!(e.contains("subinterfaces[1].protocol"), "{e}");
    let e = bad("dev = \"eth1.100\"", "dev = \"eth1.101\"");
    assert!(e.contains("routes") && e.contains("eth1.101"), "{e}");
    let e = bad(
        "parent = \"eth2\"\nvlan = 200\ninner_vlan = 300",
        "parent = \"eth1\"\nvlan = 100\nprotocol = \"802.1Q\"",
    );
    assert!(e.contains("same tags"), "{e}");
    let e = bad("parent = \"eth2\"", "parent = \"eth1.100\"");
    assert!(
        e.contains("subinterfaces[1].parent") && e.contains("not another"),
        "{e}"
    );
    let e = bad("mode = \"l3fwd\"", "mode = \"l2fwd\"");
    assert!(e.contains("subinterfaces") && e.contains("l3fwd"), "{e}");
}
