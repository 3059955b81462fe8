//! The ports' links and addresses as the control thread follows them: a port going down or
//! up (with its MTU), deleted and created again under its name (its sockets reopened), and
//! its addresses handed to the pollers.
use super::*;

impl Control {
    /// Port `port`'s sub-interfaces follow its link state and MTU (each at most its own
    /// configured MTU), as a Linux VLAN device follows its lower device.
    pub(super) fn subinterfaces_follow(&mut self, port: u16, mtu: u32, up: bool) {
        let first = self.spec.config.interfaces.len();
        let spec = &mut self.spec;
        for (k, s) in spec.config.subinterfaces.iter().enumerate() {
            // A kernel VLAN device follows its own link events (the kernel's own following).
            if s.parent != port || s.ifindex.is_some() {
                continue;
            }
            let Ok(id) = u16::try_from(first + k) else {
                continue;
            };
            let mtu = s.mtu.map_or(mtu, |own| own.min(mtu));
            spec.rib.writer().set_port(id, mtu, up);
        }
    }

    /// Hands port `p`'s addresses to the pollers.
    pub(super) fn publish_addrs(&self, p: usize) {
        if let (Some(pa), Some(a), Ok(port)) = (
            self.spec.port_addrs.as_ref(),
            self.addrs.get(p),
            u16::try_from(p),
        ) {
            pa.set(port, a.clone());
        }
    }

    /// A port's interface created again under its name: its sockets are reopened there (the
    /// run's main thread and the pollers), and the port stays gone in the table until they
    /// are ([`Control::resume_reopened`]).
    pub(super) fn port_back(
        &mut self,
        i: usize,
        ifindex: u32,
        name: &str,
        up: bool,
        mtu: Option<u32>,
    ) {
        let Some(was) = self.spec.ports.get(i).map(|p| p.ifindex) else {
            return;
        };
        let Ok(port) = u16::try_from(i) else {
            return;
        };
        let Some(tx) = self.spec.ports_back.clone() else {
            self.note(format!(
                "port {name} exists again (ifindex {ifindex}, was {was}): restart the dataplane to forward on it"
            ));
            return;
        };
        // The old device renamed, not deleted: its driver may still write into the frames its
        // sockets hold, so they cannot be taken back for the new one (a deleted device's are
        // released as it unregisters).
        if let Some(now) = crate::sys::if_name(was).filter(|_| was != ifindex) {
            self.warn(format!(
                "port {name}: a new interface (ifindex {ifindex}) took its name while the old one (ifindex {was}) still exists as {now}: restart the dataplane to forward on the new one"
            ));
            return;
        }
        self.by_ifindex.remove(&was);
        self.by_ifindex.insert(ifindex, port);
        if let Some(p) = self.spec.ports.get_mut(i) {
            p.ifindex = ifindex;
        }
        self.reopening.insert(port, (mtu.unwrap_or(0), up));
        let _ = tx.send(PortBack {
            port,
            ifname: name.to_string(),
            ifindex,
        });
        self.note(format!(
            "port {name} exists again (ifindex {ifindex}, was {was}): reopening its sockets"
        ));
    }

    /// Ports whose sockets were reopened: back in the table with their link state.
    pub(super) fn resume_reopened(&mut self) {
        let Some(rx) = &self.spec.resumed else {
            return;
        };
        let ports: Vec<u16> = rx.try_iter().collect();
        for port in ports {
            let Some((mtu, up)) = self.reopening.remove(&port) else {
                continue;
            };
            self.spec.rib.writer().set_port(port, mtu, up);
            self.subinterfaces_follow(port, mtu, up);
            if let Some(s) = self.link_up.get_mut(usize::from(port)) {
                *s = Some(up);
            }
            let name = self
                .spec
                .ports
                .get(usize::from(port))
                .map(|p| p.name.clone())
                .unwrap_or_default();
            self.note(format!(
                "port {name}: sockets reopened on the new interface: forwarding resumes (link {})",
                if up { "up" } else { "down" }
            ));
            // Its routes and neighbours (kernel mode) came with the new device: read again.
            self.resync_wanted = true;
        }
    }

    /// A port's link changed (or was deleted, or created again); true when it came back up.
    pub(super) fn link(
        &mut self,
        add: bool,
        ifindex: u32,
        name: &str,
        up: bool,
        mtu: Option<u32>,
    ) -> bool {
        let Some(&port) = self.by_ifindex.get(&ifindex) else {
            if add {
                if let Some(i) = self.spec.ports.iter().position(|p| p.name == name) {
                    if self.link_up.get(i) == Some(&None) || self.spec.ports[i].ifindex != ifindex {
                        self.port_back(i, ifindex, name, up, mtu);
                    }
                }
            }
            return false;
        };
        let i = usize::from(port);
        let was = self.link_up.get(i).copied().flatten();
        if add {
            if let Some(state) = self.reopening.get_mut(&port) {
                // Still reopening: remember its state for when it resumes.
                *state = (mtu.unwrap_or(state.0), up);
                return false;
            }
        } else {
            self.reopening.remove(&port);
        }
        if !add {
            self.warn(format!(
                "port {name} (ifindex {ifindex}) was deleted: its frames are dropped as link_down{}",
                if self.spec.ports_back.is_some() {
                    " until it is created again"
                } else {
                    "; restart the dataplane to use it again"
                }
            ));
            self.spec.rib.writer().set_port_gone(port);
            self.subinterfaces_follow(port, 0, false);
            self.by_ifindex.remove(&ifindex);
            if let Some(s) = self.link_up.get_mut(i) {
                *s = None;
            }
            // The kernel flushes IPv4 routes through a deleted (or downed) device without a
            // notification: re-read its tables.
            self.resync_wanted = true;
            return false;
        }
        let old_mtu = self.spec.rib.table().port(port).map(|(m, _)| m);
        let mtu = mtu.or(old_mtu).unwrap_or(0);
        self.spec.rib.writer().set_port(port, mtu, up);
        self.subinterfaces_follow(port, mtu, up);
        if let Some(old) = old_mtu.filter(|&o| o != mtu && was.is_some()) {
            self.note(format!(
                "port {name}: mtu now {mtu} (was {old}): packets up to it are forwarded, larger ones fragmented or answered with ICMP"
            ));
        }
        if was == Some(true) && !up {
            self.resync_wanted = true;
        }
        if was.is_some() && was != Some(up) {
            self.note(format!(
                "port {name}: link {}",
                if up {
                    "up: forwarding resumes"
                } else {
                    "down: its frames are dropped as link_down"
                }
            ));
        }
        if let Some(s) = self.link_up.get_mut(i) {
            *s = Some(up);
        }
        was == Some(false) && up
    }
}
