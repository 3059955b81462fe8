//! From the file as written to a [`Config`]: each section checked in its own step, in the
//! order a reader of the file meets them, the first wrong value refused with its key.
use std::collections::HashSet;
use std::path::Path;

use super::routes::{routes_from_file, routes_from_sections};
use super::PortOf;
use super::{invalid, parse_align, port, Config, ConfigError, ConfigFile, DataplaneSection};
use super::{InterfaceSection, NeighbourSection, PollerSection, RebalanceSection, RouteSource};
use crate::types::{parse_mac, Mode, Neighbour, MAX_PORTS};

/// Checks every section and builds the validated config (`ncpu`: the CPUs of the machine it
/// is checked for; `base`: where a relative `routes_file` is looked up).
pub(super) fn validate(
    file: ConfigFile,
    base: Option<&Path>,
    ncpu: usize,
) -> Result<Config, ConfigError> {
    dataplane(&file.dataplane)?;
    let mut port_of = interfaces(&file.interfaces)?;
    let l2_peer = l2_peers(&file.interfaces, &port_of)?;
    let subinterfaces =
        super::subif::subinterfaces(&file.subinterfaces, &mut port_of, file.interfaces.len())?;
    if !subinterfaces.is_empty() && file.dataplane.mode != Mode::L3fwd {
        return Err(invalid(
            "subinterfaces",
            subinterfaces.len(),
            "sub-interfaces are routed: they need dataplane.mode = \"l3fwd\"",
        ));
    }
    pollers(&file.pollers, ncpu)?;
    let mut routes = routes_from_sections(&file.routes, &port_of)?;
    if let Some(rf) = &file.dataplane.routes_file {
        let path = match base {
            Some(b) if rf.is_relative() => b.join(rf),
            _ => rf.clone(),
        };
        routes.extend(routes_from_file(&path, &port_of)?);
    }
    let neighbours = neighbours(&file.neighbours, &port_of)?;
    rebalance(&file.rebalance)?;
    let d = &file.dataplane;
    if file.rebalance.enabled && d.xdp_mode == super::XdpMode::Generic {
        return Err(invalid(
            "rebalance.enabled",
            true,
            "needs dataplane.xdp_mode = \"native\": the per-bucket counts come from a device-bound program, which the kernel attaches in the driver only",
        ));
    }
    if file.rebalance.enabled && d.stats != super::StatsMode::Percpu {
        return Err(invalid(
            "rebalance.enabled",
            true,
            "needs dataplane.stats = \"percpu\": the balancer reads each poller's busy share",
        ));
    }
    if d.routes == RouteSource::Kernel && !(routes.is_empty() && neighbours.is_empty()) {
        return Err(invalid(
            "dataplane.routes",
            "\"kernel\"",
            "routes come from the kernel: remove [[routes]], [[neighbours]] and routes_file",
        ));
    }
    if d.mode == Mode::L3fwd && routes.is_empty() && d.routes == RouteSource::Static {
        return Err(invalid(
            "routes",
            "[]",
            "mode l3fwd needs at least one route",
        ));
    }
    Ok(Config {
        dataplane: file.dataplane.clone(),
        interfaces: file.interfaces.iter().map(|i| i.name.clone()).collect(),
        l2_peer,
        pollers: file.pollers,
        routes,
        neighbours,
        rebalance: file.rebalance,
        subinterfaces,
    })
}

/// `[rebalance]`: periods, shares and counts in the ranges the balancer can work with.
fn rebalance(r: &RebalanceSection) -> Result<(), ConfigError> {
    // At least 100 ms: a sleeping poller wakes every 50 ms at most, and a period in which a
    // poller neither passed nor slept reads as a poller that stopped.
    if !(100..=60_000).contains(&r.period_ms) {
        return Err(invalid(
            "rebalance.period_ms",
            r.period_ms,
            "must be 100..=60000",
        ));
    }
    if !(100..=r.period_ms).contains(&r.fast_period_ms) {
        return Err(invalid(
            "rebalance.fast_period_ms",
            r.fast_period_ms,
            format!("must be 100..=period_ms ({})", r.period_ms),
        ));
    }
    if !(r.threshold > 0.0 && r.threshold <= 1.0) {
        return Err(invalid(
            "rebalance.threshold",
            r.threshold,
            "must be over 0 and at most 1 (0.10: act at 1.10 times the mean)",
        ));
    }
    if let Some(t) = r.target_load {
        if !(t > 0.0 && t <= 1.0) {
            return Err(invalid(
                "rebalance.target_load",
                t,
                "must be over 0 and at most 1 (a poller's busy share)",
            ));
        }
    }
    if r.max_moves == 0 {
        return Err(invalid(
            "rebalance.max_moves",
            r.max_moves,
            "must be at least 1",
        ));
    }
    if !(0.0..=1.0).contains(&r.min_gap) {
        return Err(invalid(
            "rebalance.min_gap",
            r.min_gap,
            "must be 0..=1 (a share of one core)",
        ));
    }
    if !(r.heavy > 0.0 && r.heavy <= 4.0) {
        return Err(invalid(
            "rebalance.heavy",
            r.heavy,
            "must be over 0 and at most 4 (shares of one core)",
        ));
    }
    Ok(())
}

/// `[dataplane]`: each knob within what the rings, the UMEM and the kernel accept.
fn dataplane(d: &DataplaneSection) -> Result<(), ConfigError> {
    if d.icmp_rate > 0 && d.icmp_burst == 0 {
        return Err(invalid(
            "dataplane.icmp_burst",
            d.icmp_burst,
            "must be at least 1 while icmp_rate > 0 (icmp_rate = 0 turns ICMP errors off)",
        ));
    }
    if !(1..=256).contains(&d.batch_size) {
        return Err(invalid(
            "dataplane.batch_size",
            d.batch_size,
            "must be 1..=256",
        ));
    }
    if !d.ring_size.is_power_of_two() || !(64..=65536).contains(&d.ring_size) {
        return Err(invalid(
            "dataplane.ring_size",
            d.ring_size,
            "must be a power of two in 64..=65536",
        ));
    }
    if d.frame_size != 2048 && d.frame_size != 4096 {
        return Err(invalid(
            "dataplane.frame_size",
            d.frame_size,
            "must be 2048 or 4096",
        ));
    }
    if d.frames_per_queue < d.ring_size || d.frames_per_queue > 1 << 20 {
        return Err(invalid(
            "dataplane.frames_per_queue",
            d.frames_per_queue,
            format!(
                "must be at least ring_size ({}) and at most 1048576",
                d.ring_size
            ),
        ));
    }
    if parse_align(&d.align).is_none() {
        return Err(invalid(
            "dataplane.align",
            &d.align,
            "must be \"cacheline\" or \"offset:N\" with N in 1..=63",
        ));
    }
    if d.tx_kick_budget > 4096 {
        return Err(invalid(
            "dataplane.tx_kick_budget",
            d.tx_kick_budget,
            "must be 0 (kernel default) to 4096",
        ));
    }
    Ok(())
}

/// `[[interfaces]]`: one to [`MAX_PORTS`] valid, distinct kernel names; their port indexes.
fn interfaces(list: &[InterfaceSection]) -> Result<PortOf<'_>, ConfigError> {
    if list.is_empty() {
        return Err(invalid(
            "interfaces",
            "[]",
            "at least one interface is needed",
        ));
    }
    if list.len() > MAX_PORTS {
        return Err(invalid(
            "interfaces",
            list.len(),
            format!(
                "at most {} interfaces (a next hop names its port in 12 bits)",
                MAX_PORTS
            ),
        ));
    }
    let mut port_of = PortOf::new();
    for (i, itf) in list.iter().enumerate() {
        if itf.name.is_empty() || itf.name.len() > 15 || itf.name.contains(['/', ' ']) {
            return Err(invalid(
                format!("interfaces[{i}].name"),
                &itf.name,
                "not a valid interface name",
            ));
        }
        if port_of.insert(&itf.name, i as u16).is_some() {
            return Err(invalid(
                format!("interfaces[{i}].name"),
                &itf.name,
                "listed twice",
            ));
        }
    }
    Ok(port_of)
}

/// Each port's l2fwd/bounce peer (itself unless `peer` names another).
fn l2_peers(list: &[InterfaceSection], port_of: &PortOf<'_>) -> Result<Vec<u16>, ConfigError> {
    list.iter()
        .enumerate()
        .map(|(i, itf)| match &itf.peer {
            Some(p) => port(port_of, format!("interfaces[{i}].peer"), p),
            None => Ok(i as u16),
        })
        .collect()
}

/// `[[pollers]]`: at least one; CPUs this machine has; each queue owned by one poller.
fn pollers(list: &[PollerSection], ncpu: usize) -> Result<(), ConfigError> {
    if list.is_empty() {
        return Err(invalid("pollers", "[]", "at least one poller is needed"));
    }
    let mut seen_q = HashSet::new();
    for (i, p) in list.iter().enumerate() {
        if let Some(cpu) = p.cpu {
            if cpu >= ncpu {
                return Err(invalid(
                    format!("pollers[{i}].cpu"),
                    cpu,
                    format!("this machine has CPUs 0..{}", ncpu - 1),
                ));
            }
        }
        if p.queues.is_empty() {
            return Err(invalid(
                format!("pollers[{i}].queues"),
                "[]",
                "a poller needs at least one queue",
            ));
        }
        for q in &p.queues {
            if *q >= 256 {
                return Err(invalid(
                    format!("pollers[{i}].queues"),
                    q,
                    "queue ids are 0..=255",
                ));
            }
            if !seen_q.insert(*q) {
                return Err(invalid(
                    format!("pollers[{i}].queues"),
                    q,
                    "queue already owned by another poller",
                ));
            }
        }
    }
    Ok(())
}

/// `[[neighbours]]`: address, MAC and port of each static entry.
fn neighbours(
    list: &[NeighbourSection],
    port_of: &PortOf<'_>,
) -> Result<Vec<Neighbour>, ConfigError> {
    let mut out = Vec::with_capacity(list.len());
    for (i, n) in list.iter().enumerate() {
        let key = format!("neighbours[{i}]");
        out.push(Neighbour {
            ip: n
                .ip
                .parse()
                .map_err(|_| invalid(format!("{key}.ip"), &n.ip, "not an IP address"))?,
            mac: parse_mac(&n.mac).ok_or_else(|| {
                invalid(
                    format!("{key}.mac"),
                    &n.mac,
                    "not a MAC address aa:bb:cc:dd:ee:ff",
                )
            })?,
            port: port(port_of, format!("{key}.dev"), &n.dev)?,
        });
    }
    Ok(out)
}
