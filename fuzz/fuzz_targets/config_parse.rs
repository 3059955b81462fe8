//! The config and its routes file, from arbitrary text: `Config::parse_for` never panics, and
//! a config it accepts holds what the rest of the program relies on (prefix lengths within
//! the family, gateways of the prefix's family, ports and pollers that exist, no duplicate
//! interface). Inputs: raw TOML, or a valid config with the fuzzer's routes (a routes file and
//! `[[routes]]` tables built from addresses or arbitrary words), neighbours and extra keys.
#![no_main]
use std::path::PathBuf;
use std::sync::OnceLock;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;

use dataplane::config::Config;

/// An address, or a word that may not be one.
#[derive(Arbitrary, Debug)]
enum Word {
    V4(u32),
    V6(u128),
    Raw(String),
}

impl std::fmt::Display for Word {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Word::V4(a) => write!(f, "{}", std::net::Ipv4Addr::from(*a)),
            Word::V6(a) => write!(f, "{}", std::net::Ipv6Addr::from(*a)),
            Word::Raw(w) => f.write_str(w),
        }
    }
}

/// One route: rendered as a routes-file line and as a `[[routes]]` table.
#[derive(Arbitrary, Debug)]
struct RouteSpec {
    prefix: Word,
    len: Option<u8>,
    via: Vec<Word>,
    /// 0: in0, 1: out0, 2: an interface the config lacks, else none.
    dev: u8,
}

impl RouteSpec {
    fn dev(&self) -> Option<&'static str> {
        match self.dev % 4 {
            0 => Some("in0"),
            1 => Some("out0"),
            2 => Some("nope0"),
            _ => None,
        }
    }

    fn prefix(&self) -> String {
        match self.len {
            Some(l) => format!("{}/{}", self.prefix, l % 140),
            None => self.prefix.to_string(),
        }
    }

    fn line(&self) -> String {
        let mut l = self.prefix();
        for v in &self.via {
            l.push_str(&format!(" via {v}"));
        }
        if let Some(d) = self.dev() {
            l.push_str(&format!(" dev {d}"));
        }
        l
    }

    fn table(&self) -> String {
        let mut t = format!("[[routes]]\nprefix = {:?}\n", self.prefix());
        match self.via.as_slice() {
            [] => {}
            [one] => t.push_str(&format!("via = {:?}\n", one.to_string())),
            many => {
                let v: Vec<String> = many
                    .iter()
                    .map(|w| format!("{:?}", w.to_string()))
                    .collect();
                t.push_str(&format!("via = [{}]\n", v.join(", ")));
            }
        }
        if let Some(d) = self.dev() {
            t.push_str(&format!("dev = {d:?}\n"));
        }
        t
    }
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Raw TOML instead of the template.
    raw: Option<String>,
    /// The routes file's lines, and raw lines between them.
    file_routes: Vec<(RouteSpec, Option<String>)>,
    /// `[[routes]]` tables after the template.
    table_routes: Vec<RouteSpec>,
    /// `[[neighbours]]`: address, MAC bytes, interface choice.
    neighbours: Vec<(Word, [u8; 6], u8)>,
    /// Extra keys for the template's `[dataplane]` table.
    knobs: String,
}

const TEMPLATE: &str = "[dataplane]\nmode = \"l3fwd\"\nroutes_file = \"fuzz.routes\"\n@KNOBS@\n\n\
[[interfaces]]\nname = \"in0\"\n[[interfaces]]\nname = \"out0\"\n\n\
[[pollers]]\ncpu = 0\nqueues = [0]\n\n@TAIL@\n";

/// A directory of this process's own for the routes file.
fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("dp-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("fuzz dir");
        d
    })
}

fuzz_target!(|input: Input| {
    let text = match &input.raw {
        Some(raw) => raw.clone(),
        None => {
            let mut tail: String = input.table_routes.iter().map(RouteSpec::table).collect();
            for (ip, mac, dev) in &input.neighbours {
                let mac: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
                let dev = ["in0", "out0", "nope0"][usize::from(*dev % 3)];
                tail.push_str(&format!(
                    "[[neighbours]]\nip = {:?}\nmac = \"{}\"\ndev = \"{dev}\"\n",
                    ip.to_string(),
                    mac.join(":")
                ));
            }
            TEMPLATE
                .replace("@KNOBS@", &input.knobs)
                .replace("@TAIL@", &tail)
        }
    };
    let mut file = String::new();
    for (r, junk) in &input.file_routes {
        file.push_str(&r.line());
        file.push('\n');
        if let Some(j) = junk {
            file.push_str(j);
            file.push('\n');
        }
    }
    if std::fs::write(dir().join("fuzz.routes"), &file).is_err() {
        return;
    }
    let Ok(cfg) = Config::parse_for(&text, "fuzz", Some(dir()), 4) else {
        return;
    };
    let ports = cfg.interfaces.len();
    assert!(ports > 0, "a config without interfaces was accepted");
    for (i, a) in cfg.interfaces.iter().enumerate() {
        assert!(
            !cfg.interfaces[..i].contains(a),
            "interface {a} accepted twice"
        );
    }
    assert_eq!(cfg.l2_peer.len(), ports, "an L2 peer per port");
    assert!(cfg.l2_peer.iter().all(|&p| usize::from(p) < ports));
    assert!(
        !cfg.pollers.is_empty(),
        "a config without pollers was accepted"
    );
    for p in &cfg.pollers {
        assert!(!p.queues.is_empty(), "a poller without queues was accepted");
        if let Some(c) = p.cpu {
            assert!(c < 4, "cpu {c} accepted on a 4-CPU machine");
        }
    }
    for r in &cfg.routes {
        let max = if r.prefix.is_ipv4() { 32 } else { 128 };
        assert!(r.len <= max, "route {}/{} accepted", r.prefix, r.len);
        assert!(
            usize::from(r.port) < ports,
            "route to port {} of {ports}",
            r.port
        );
        for g in &r.via {
            assert_eq!(
                g.is_ipv4(),
                r.prefix.is_ipv4(),
                "gateway {g} of another family than {}",
                r.prefix
            );
        }
    }
    for n in &cfg.neighbours {
        assert!(
            usize::from(n.port) < ports,
            "neighbour on port {} of {ports}",
            n.port
        );
    }
});
