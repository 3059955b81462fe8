//! The steering programs, in two phases. Loaded (not attached) before the pollers start, with
//! the box's own addresses to pass to the kernel; once every poller is ready, its sockets go
//! into the XSKMAPs and the programs are attached; then the interrupt plan is applied.
use std::net::IpAddr;

use super::RunError;
use crate::bpf::Steer;
use crate::config::{Config, XdpMode};
use crate::packet::vlan::{Tag, TagStack};
use crate::placement::affinity;
use crate::placement::journal::SettingsJournal;
use crate::placement::plan::Plan;
use crate::poller::Ready;
use crate::sys;

/// Loads one steering program per interface and fills its local-address map (the kernel's
/// addresses and the sub-interfaces') and its sub-interfaces' tag stacks; a port whose
/// indirection table the rebalancer owns gets the device-bound program that counts buckets.
pub(super) fn load_steering(
    cfg: &Config,
    tables: &crate::rebalance::Found,
) -> Result<Vec<Steer>, RunError> {
    let locals: Vec<IpAddr> = sys::local_addresses()?
        .into_iter()
        .map(|(_, a)| a)
        .collect();
    let mut steers = Vec::new();
    for (port, name) in cfg.interfaces.iter().enumerate() {
        let mac = sys::interface_mac(name).ok_or_else(|| RunError::NoInterface(name.clone()))?;
        let mut s = Steer::load_with(name, mac, crate::rebalance::counting(tables, port))?;
        for a in &locals {
            s.add_local(*a)?;
        }
        let mine = cfg
            .subinterfaces
            .iter()
            .filter(|sub| usize::from(sub.parent) == port);
        if mine.clone().next().is_some() {
            // A priority tag on a port with sub-interfaces is the port's own (802.1Q 9.6).
            s.add_vlan(TagStack::one(Tag::dot1q(0)).key())?;
        }
        for sub in mine {
            s.add_vlan(sub.tags.key())?;
        }
        for sub in &cfg.subinterfaces {
            // The box's own, on whichever port it arrives.
            for (a, _) in &sub.addresses {
                s.add_local(*a)?;
            }
        }
        steers.push(s);
    }
    Ok(steers)
}

/// True when the config asks for generic (skb) XDP.
pub(super) fn generic(cfg: &Config) -> bool {
    cfg.dataplane.xdp_mode == XdpMode::Generic
}

/// Puts every poller's sockets into the XSKMAPs, then attaches every program. On error the
/// caller detaches what was attached.
pub(super) fn wire(steers: &mut [Steer], readies: &[Ready], cfg: &Config) -> Result<(), RunError> {
    for r in readies {
        for (port, queue, fd) in &r.fds {
            let steer = steers
                .get_mut(usize::from(*port))
                .ok_or_else(|| RunError::Thread(format!("poller {} reported port {port}", r.id)))?;
            steer.register_socket(*queue, *fd)?;
        }
    }
    for s in steers.iter_mut() {
        s.attach(generic(cfg))?;
    }
    Ok(())
}

/// Moves every planned queue's receive work (IRQ or NAPI thread) to its planned interrupt
/// CPU, on every interface. On error the caller restores what was changed.
pub(super) fn apply_irq(
    irq: &mut SettingsJournal,
    plan: Option<&Plan>,
    cfg: &Config,
) -> Result<(), RunError> {
    for e in plan.iter().flat_map(|p| p.entries.iter()) {
        if let Some(cpu) = e.irq_cpu {
            for name in &cfg.interfaces {
                affinity::apply(irq, name, e.queue, cpu)?;
            }
        }
    }
    Ok(())
}

/// The (port, feature) pairs of VLAN tag stripping to turn off: each port that carries a
/// sub-interface and strips now. A port that strips and cannot stop is refused. A device
/// that cannot say (no ethtool features) is taken as one that does not strip. (A kernel
/// VLAN device made during the run on a port that strips is left to the kernel:
/// [`crate::control::vlans::VLAN_STRIPPING`].)
pub(super) fn vlan_stripping(cfg: &Config) -> Result<Vec<(String, &'static str)>, RunError> {
    let mut out = Vec::new();
    for (port, name) in cfg.interfaces.iter().enumerate() {
        if !cfg
            .subinterfaces
            .iter()
            .any(|s| usize::from(s.parent) == port)
        {
            continue;
        }
        for feature in crate::control::vlans::VLAN_STRIPPING {
            let Ok(Some(f)) = sys::feature(name, feature) else {
                continue;
            };
            if !f.active {
                continue;
            }
            if !f.changeable {
                return Err(RunError::VlanStripping {
                    ifname: name.clone(),
                    feature,
                    why: "the driver does not let it be turned off".into(),
                });
            }
            out.push((name.clone(), feature));
        }
    }
    Ok(out)
}

/// Turns off each of `stripping` ([`vlan_stripping`]), journaled first (restored at stop,
/// or by `dataplane restore`).
pub(super) fn vlan_stripping_off(
    stripping: &[(String, &'static str)],
    journal: &mut SettingsJournal,
    log: &mut impl FnMut(&str),
) -> Result<(), RunError> {
    for (name, feature) in stripping {
        journal
            .turn_off_feature(name, feature)
            .map_err(|why| RunError::VlanStripping {
                ifname: name.clone(),
                feature,
                why,
            })?;
        log(&format!(
            "vlan: {name} {feature} off while the dataplane forwards its sub-interfaces (on again at stop)"
        ));
    }
    Ok(())
}
