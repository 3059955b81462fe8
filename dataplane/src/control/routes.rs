//! Kernel routes mirrored into the table (the lowest metric of a prefix wins, the others wait),
//! and the neighbours the pollers miss asked of the kernel.
use super::*;

impl Control {
    /// A kernel route added or removed. Among routes of one prefix the lowest metric is in
    /// the table; the others wait in `alternates` until it goes.
    pub(super) fn kernel_route(
        &mut self,
        add: bool,
        prefix: IpAddr,
        len: u8,
        metric: u32,
        route: KernelRoute,
    ) {
        let key = (crate::fib::rib::canonical(prefix, len), len);
        let current = self.spec.rib.route_tagged(key.0, len).map(|(_, m)| m);
        if add {
            let kind = self.kind(&route);
            match current {
                Some(m) if metric > m => {
                    let alts = self.alternates.entry(key).or_default();
                    alts.retain(|(x, _)| *x != metric);
                    alts.push((metric, kind));
                }
                Some(m) if metric < m => {
                    if let Some((k, _)) = self.spec.rib.route_tagged(key.0, len) {
                        let demoted = k.clone();
                        self.alternates.entry(key).or_default().push((m, demoted));
                    }
                    self.set_best(key.0, len, Some((kind, metric)));
                }
                _ => self.set_best(key.0, len, Some((kind, metric))),
            }
        } else if current == Some(metric) {
            let next = self.alternates.get_mut(&key).and_then(|alts| {
                let i = (0..alts.len()).min_by_key(|i| alts[*i].0)?;
                Some(alts.swap_remove(i))
            });
            if self.alternates.get(&key).is_some_and(Vec::is_empty) {
                self.alternates.remove(&key);
            }
            self.set_best(key.0, len, next.map(|(m, k)| (k, m)));
        } else if let Some(alts) = self.alternates.get_mut(&key) {
            alts.retain(|(x, _)| *x != metric);
            if alts.is_empty() {
                self.alternates.remove(&key);
            }
        }
    }

    /// Puts `kind` (with its metric) in the table for `prefix/len`, or removes the prefix.
    pub(super) fn set_best(&mut self, prefix: IpAddr, len: u8, best: Option<(RouteKind, u32)>) {
        let was_foreign = matches!(self.spec.rib.route(prefix, len), Some(RouteKind::Foreign));
        let r = match best {
            None => {
                self.spec.rib.remove_route(prefix, len);
                Ok(())
            }
            Some((kind, metric)) => self.spec.rib.set_route_tagged(prefix, len, kind, metric),
        };
        let now = match self.spec.rib.route(prefix, len) {
            None => RouteNow::Gone,
            Some(RouteKind::Foreign) => RouteNow::Foreign,
            Some(_) => RouteNow::Dataplane,
        };
        if was_foreign || now == RouteNow::Foreign || !self.foreign.is_empty() {
            let rib = &self.spec.rib;
            let changes = self.foreign.route_changed(
                crate::fib::rib::canonical(prefix, len),
                len,
                now,
                || {
                    Box::new(
                        rib.routes()
                            .filter(|(_, k)| !matches!(k, RouteKind::Foreign))
                            .map(|(k, _)| *k),
                    )
                },
            );
            if let Some(tx) = &self.spec.foreign_routes {
                for c in changes {
                    let _ = tx.send(c);
                }
            }
        }
        if let Err(e) = r {
            self.warn(format!("control: route {prefix}/{len}: {e}"));
        }
    }

    /// What a kernel route does here: paths out of dataplane ports, or `Foreign`.
    pub(super) fn kind(&self, r: &KernelRoute) -> RouteKind {
        match r {
            KernelRoute::Blackhole => RouteKind::Blackhole,
            KernelRoute::Unreachable => RouteKind::Unreachable,
            KernelRoute::Prohibit => RouteKind::Prohibit,
            KernelRoute::Unicast(paths) => {
                let ours: Vec<(u16, Option<IpAddr>)> = paths
                    .iter()
                    .filter_map(|(ifx, gw)| Some((*self.by_ifindex.get(ifx)?, *gw)))
                    .collect();
                match ours.as_slice() {
                    [] => RouteKind::Foreign,
                    [(port, None)] => RouteKind::Connected { port: *port },
                    _ => {
                        let via: Vec<(u16, IpAddr)> =
                            ours.iter().filter_map(|(p, g)| Some((*p, (*g)?))).collect();
                        if via.is_empty() {
                            RouteKind::Connected { port: ours[0].0 }
                        } else {
                            RouteKind::Via(via)
                        }
                    }
                }
            }
        }
    }

    /// A link back up (kernel mode): asks the kernel to resolve the gateways of the routes out
    /// of it now, so the first frames after it comes back are not dropped as `resolving`.
    pub(super) fn resolve_gateways(&mut self, port: u16, ifindex: u32) {
        let Some(nl) = self.requests.as_mut() else {
            return;
        };
        let gateways = self.spec.rib.unresolved_gateways(port);
        let now = Instant::now();
        let mut failed = Vec::new();
        for ip in gateways.into_iter().take(256) {
            self.asked.insert(ip, now);
            self.spec.status.resolve_requests.fetch_add(1, Relaxed);
            if let Err(e) = nl.resolve(ifindex, ip) {
                failed.push(format!("control: resolving {ip}: {e}"));
            }
        }
        for f in failed {
            self.warn(f);
        }
    }

    /// Asks the kernel to resolve the neighbours behind the destinations the pollers could
    /// not forward (kernel mode; in static mode nothing resolves them).
    pub(super) fn resolve_requests(&mut self, kernel: bool) {
        self.resolve_requests_at(kernel, Instant::now());
    }

    /// [`Control::resolve_requests`] at the time `now`: one destination is asked about at
    /// most once per [`RESOLVE_AGAIN`], and at most 64 a pass.
    pub(super) fn resolve_requests_at(&mut self, kernel: bool, now: Instant) {
        let mut budget = 64;
        while let Some(dst) = self.spec.resolve.pop() {
            if !kernel || budget == 0 {
                continue;
            }
            for (port, ip) in self.spec.rib.to_resolve(dst) {
                if self
                    .asked
                    .get(&ip)
                    .is_some_and(|t| now - *t < RESOLVE_AGAIN)
                {
                    continue;
                }
                self.asked.insert(ip, now);
                budget -= 1;
                // A port's or a kernel VLAN device's (a sub-interface).
                let Some(ifindex) = self
                    .by_ifindex
                    .iter()
                    .find_map(|(ifx, p)| (*p == port).then_some(*ifx))
                else {
                    continue;
                };
                if self.spec.rib.table().port_gone(port) {
                    continue;
                }
                self.spec.status.resolve_requests.fetch_add(1, Relaxed);
                if let Some(nl) = self.requests.as_mut() {
                    if let Err(e) = nl.resolve(ifindex, ip) {
                        self.warn(format!("control: resolving {ip}: {e}"));
                    }
                }
            }
        }
        if self.asked.len() > 4096 {
            self.asked.retain(|_, t| now - *t < RESOLVE_AGAIN);
        }
    }
}
