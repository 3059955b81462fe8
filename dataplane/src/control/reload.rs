//! SIGHUP: the config read again, its routes and neighbours applied as a difference, or the
//! file refused while the running table stays (also when a knob that needs a restart changed).
use super::*;

impl Control {
    /// SIGHUP: re-read the config; apply its routes and neighbours as a difference, or
    /// refuse it (the running table stays).
    pub(super) fn reload(&mut self, kernel: bool) {
        let Some(path) = self.spec.config_path.clone() else {
            return;
        };
        let fresh = match Config::load(&path) {
            Ok(c) => c,
            Err(e) => {
                self.spec.status.reloads_refused.fetch_add(1, Relaxed);
                self.warn(format!("reload refused, the running table stays: {e}"));
                return;
            }
        };
        let restart = restart_needed(&self.spec.config, &fresh);
        if !restart.is_empty() {
            self.spec.status.reloads_refused.fetch_add(1, Relaxed);
            self.warn(format!(
                "reload refused, the running table stays: {} changed, which needs a restart",
                restart.join(", ")
            ));
            return;
        }
        if !kernel {
            let wanted: std::collections::HashSet<(IpAddr, u8)> = fresh
                .routes
                .iter()
                .map(|r| (crate::fib::rib::canonical(r.prefix, r.len), r.len))
                .collect();
            let old: Vec<(IpAddr, u8)> = self.spec.rib.routes().map(|(k, _)| *k).collect();
            for k in old.into_iter().filter(|k| !wanted.contains(k)) {
                self.spec.rib.remove_route(k.0, k.1);
            }
            let wanted_n: std::collections::HashSet<(u16, IpAddr)> =
                fresh.neighbours.iter().map(|n| (n.port, n.ip)).collect();
            let old_n: Vec<(u16, IpAddr)> = self
                .spec
                .rib
                .neighbours()
                .map(|(p, ip, _, _)| (p, ip))
                .collect();
            for k in old_n.into_iter().filter(|k| !wanted_n.contains(k)) {
                self.spec.rib.remove_neighbour(k.0, k.1);
            }
            if let Err(e) = crate::fib::static_routes::load(
                &mut self.spec.rib,
                &fresh.routes,
                &fresh.neighbours,
            ) {
                self.warn(format!("reload: applying the routes: {e}"));
            }
        }
        self.spec.status.reloads.fetch_add(1, Relaxed);
        self.note(format!(
            "reloaded {}: {} routes, {} neighbours",
            path.display(),
            fresh.routes.len(),
            fresh.neighbours.len()
        ));
        // The sub-interfaces stay as the run has them: the declared ones are the file's
        // (`restart_needed` compared them), the kernel's VLAN devices are no part of it.
        let mut fresh = fresh;
        fresh.subinterfaces = std::mem::take(&mut self.spec.config.subinterfaces);
        self.spec.config = fresh;
    }
}

/// The settings that differ between two configs and cannot change while running (all but
/// the routes and neighbours).
pub(crate) fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    let (a, b) = (&old.dataplane, &new.dataplane);
    let mut out = Vec::new();
    let mut check = |name: &'static str, same: bool| {
        if !same {
            out.push(name);
        }
    };
    check("dataplane.mode", a.mode == b.mode);
    check("dataplane.routes", a.routes == b.routes);
    check("dataplane.batch_size", a.batch_size == b.batch_size);
    check("dataplane.xdp_mode", a.xdp_mode == b.xdp_mode);
    check("dataplane.socket_mode", a.socket_mode == b.socket_mode);
    check("dataplane.idle", a.idle == b.idle);
    check("dataplane.idle_spin_us", a.idle_spin_us == b.idle_spin_us);
    check("dataplane.ring_size", a.ring_size == b.ring_size);
    check(
        "dataplane.frames_per_queue",
        a.frames_per_queue == b.frames_per_queue,
    );
    check("dataplane.frame_size", a.frame_size == b.frame_size);
    check("dataplane.memory", a.memory == b.memory);
    check("dataplane.hugepages", a.hugepages == b.hugepages);
    check("dataplane.align", a.align == b.align);
    check("dataplane.stats", a.stats == b.stats);
    check(
        "dataplane.tx_kick_budget",
        a.tx_kick_budget == b.tx_kick_budget,
    );
    check("dataplane.icmp_rate", a.icmp_rate == b.icmp_rate);
    // The kernel's VLAN devices found at the start are no part of the file.
    let declared = |c: &Config| -> Vec<crate::config::SubInterface> {
        c.subinterfaces
            .iter()
            .filter(|s| s.ifindex.is_none())
            .cloned()
            .collect()
    };
    check("subinterfaces", declared(old) == declared(new));
    check("dataplane.icmp_burst", a.icmp_burst == b.icmp_burst);
    check("interfaces", old.interfaces == new.interfaces);
    check(
        "pollers",
        old.pollers.len() == new.pollers.len()
            && old
                .pollers
                .iter()
                .zip(&new.pollers)
                .all(|(x, y)| x.cpu == y.cpu && x.queues == y.queues),
    );
    out
}
