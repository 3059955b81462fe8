//! Which interrupt serves each receive queue of a real NIC. Drivers name their MSI-X vectors
//! in `/proc/interrupts` each in their own way, and not always after the interface:
//!
//! | driver | RX queue q's vector |
//! |---|---|
//! | virtio_net | `virtioN-input.q` (N: the interface's virtio device, `device` in sysfs) |
//! | mlx5_core | `mlx5_compq@pci:BDF` (completion vector q of the PCI function) |
//! | ice | `ice-IFACE-TxRx-q` |
//! | i40e | `i40e-IFACE-TxRx-q` |
//! | ixgbe, igb, bnxt, ... | `IFACE-TxRx-q` (or `IFACE-rx-q`) |
//! | ena | `ena-comp-q@pci:BDF` |
//! | gve | `gve-ntfy-blkB@pci:BDF`, B = half the blocks + q (the first half serve TX) |
//!
//! The parsing is pure (text in, IRQ numbers out) so it is tested with recorded
//! `/proc/interrupts` lines of each driver; [`device`] reads what sysfs says of an interface.

/// One line of `/proc/interrupts`: the IRQ number and its action name (the last column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IrqLine {
    /// IRQ number.
    pub irq: u32,
    /// The name its handler registered.
    pub name: String,
}

/// Parses `/proc/interrupts` (numbered lines only; NMI, LOC and friends are skipped).
pub(crate) fn parse_interrupts(text: &str) -> Vec<IrqLine> {
    text.lines()
        .filter_map(|l| {
            let (num, rest) = l.trim_start().split_once(':')?;
            let irq = num.trim().parse::<u32>().ok()?;
            let name = rest.split_whitespace().last()?.to_string();
            Some(IrqLine { irq, name })
        })
        .collect()
}

/// What sysfs says of an interface's device.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Device {
    /// Driver name (`device/driver` link), None for virtual interfaces (veth).
    pub driver: Option<String>,
    /// The device's own name: `virtio3` for virtio_net, the PCI address `0000:03:00.0` for a
    /// PCI NIC (`device` link).
    pub bus_id: Option<String>,
    /// Its MSI / MSI-X vectors (`device/msi_irqs`), where the bus lists them.
    pub msi_irqs: Vec<u32>,
}

/// Reads `/sys/class/net/IFACE/device`.
pub(crate) fn device(ifname: &str) -> Device {
    let base = std::path::Path::new("/sys/class/net")
        .join(ifname)
        .join("device");
    let link_name = |p: &std::path::Path| {
        std::fs::read_link(p)
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    let mut msi_irqs: Vec<u32> = std::fs::read_dir(base.join("msi_irqs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    // virtio_net's device is the virtio device; its vectors belong to the PCI parent.
    if msi_irqs.is_empty() {
        msi_irqs = std::fs::read_dir(base.join("../msi_irqs"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
            .collect();
    }
    msi_irqs.sort_unstable();
    Device {
        driver: link_name(&base.join("driver")),
        bus_id: link_name(&base),
        msi_irqs,
    }
}

/// Reads the RX queue number out of a vector's name (None: not one of this device's RX
/// vectors).
type QueueOf = Box<dyn Fn(&str) -> Option<u32>>;

/// The number at the end of `name` after `prefix`, if `name` is exactly `prefix` + digits
/// (+ `suffix`).
fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u32> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

/// Per RX queue (0..`queues`), the IRQ that serves it, from the driver's naming; a queue the
/// driver's scheme does not name gets None. Unknown drivers fall back to vectors whose name
/// starts with the interface name, in the order listed (most drivers number them by queue).
pub(crate) fn rx_queue_irqs(
    ifname: &str,
    dev: &Device,
    lines: &[IrqLine],
    queues: u32,
) -> Vec<Option<u32>> {
    // Only the device's own vectors, where sysfs lists them (names can repeat across NICs).
    let own: Vec<&IrqLine> = lines
        .iter()
        .filter(|l| dev.msi_irqs.is_empty() || dev.msi_irqs.contains(&l.irq))
        .collect();
    let find = |f: &dyn Fn(&str) -> Option<u32>, q: u32| {
        own.iter().find(|l| f(&l.name) == Some(q)).map(|l| l.irq)
    };
    let bus = dev.bus_id.clone().unwrap_or_default();
    let at_pci = format!("@pci:{bus}");
    let by_name: QueueOf = match dev.driver.as_deref() {
        Some("virtio_net") => {
            let prefix = format!("{bus}-input.");
            Box::new(move |n: &str| numbered(n, &prefix, ""))
        }
        Some("mlx5_core") => Box::new(move |n: &str| numbered(n, "mlx5_comp", &at_pci)),
        Some("ena") => Box::new(move |n: &str| numbered(n, "ena-comp-", &at_pci)),
        Some("gve") => {
            let blocks = own
                .iter()
                .filter(|l| numbered(&l.name, "gve-ntfy-blk", &at_pci).is_some())
                .count() as u32;
            let first_rx = blocks / 2;
            Box::new(move |n: &str| {
                numbered(n, "gve-ntfy-blk", &at_pci).and_then(|b| b.checked_sub(first_rx))
            })
        }
        Some(d @ ("ice" | "i40e")) => {
            let prefix = format!("{d}-{ifname}-TxRx-");
            Box::new(move |n: &str| numbered(n, &prefix, ""))
        }
        _ => {
            let (a, b) = (format!("{ifname}-TxRx-"), format!("{ifname}-rx-"));
            Box::new(move |n: &str| numbered(n, &a, "").or_else(|| numbered(n, &b, "")))
        }
    };
    let named: Vec<Option<u32>> = (0..queues).map(|q| find(&*by_name, q)).collect();
    if named.iter().any(Option::is_some) {
        return named;
    }
    // Unknown scheme: the vectors named after the interface, in the order listed.
    let mut after_iface = own
        .iter()
        .filter(|l| l.name.starts_with(ifname))
        .map(|l| l.irq);
    (0..queues).map(|_| after_iface.next()).collect()
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // tests may panic
mod tests {
    use super::*;

    /// Lines as each driver registers them (CPU columns trimmed to two).
    const INTERRUPTS: &str = "           CPU0       CPU1
  0:         35          0   IO-APIC   2-edge      timer
 24:          0          0   PCI-MSIX-0000:00:02.0   0-edge      virtio0-config
 25:        120          3   PCI-MSIX-0000:00:02.0   1-edge      virtio0-input.0
 26:          1         40   PCI-MSIX-0000:00:02.0   2-edge      virtio0-output.0
 27:         80          9   PCI-MSIX-0000:00:02.0   3-edge      virtio0-input.1
 28:          2          0   PCI-MSIX-0000:00:02.0   4-edge      virtio0-output.1
 29:          0          0   PCI-MSIX-0000:00:03.0   0-edge      virtio1-config
 30:          7          0   PCI-MSIX-0000:00:03.0   1-edge      virtio1-input.0
 40:          0          0   PCI-MSIX-0000:03:00.0   0-edge      mlx5_async0@pci:0000:03:00.0
 41:        500          0   PCI-MSIX-0000:03:00.0   1-edge      mlx5_comp0@pci:0000:03:00.0
 42:          0        600   PCI-MSIX-0000:03:00.0   2-edge      mlx5_comp1@pci:0000:03:00.0
 50:          1          0   PCI-MSIX-0000:5e:00.0   0-edge      ice-0000:5e:00.0:misc
 51:        900          0   PCI-MSIX-0000:5e:00.0   1-edge      ice-ens1f0-TxRx-0
 52:          0        901   PCI-MSIX-0000:5e:00.0   2-edge      ice-ens1f0-TxRx-1
 60:          1          0   PCI-MSIX-0000:3b:00.0   0-edge      i40e-0000:3b:00.0:misc
 61:         10          0   PCI-MSIX-0000:3b:00.0   1-edge      i40e-eno1-TxRx-0
 62:         11          0   PCI-MSIX-0000:3b:00.0   2-edge      i40e-eno1-TxRx-1
 70:         12          0   PCI-MSIX-0000:04:00.0   0-edge      enp4s0f0-TxRx-0
 71:         13          0   PCI-MSIX-0000:04:00.0   1-edge      enp4s0f0-TxRx-1
 72:          1          0   PCI-MSIX-0000:04:00.0   2-edge      enp4s0f0
 80:          0          0   PCI-MSIX-0000:00:05.0   0-edge      ena-mgmnt@pci:0000:00:05.0
 81:        300          0   PCI-MSIX-0000:00:05.0   1-edge      ena-comp-0@pci:0000:00:05.0
 82:          0        301   PCI-MSIX-0000:00:05.0   2-edge      ena-comp-1@pci:0000:00:05.0
 90:          0          0   PCI-MSIX-0000:00:04.0   0-edge      gve-mgmnt@pci:0000:00:04.0
 91:          5          0   PCI-MSIX-0000:00:04.0   1-edge      gve-ntfy-blk0@pci:0000:00:04.0
 92:          5          0   PCI-MSIX-0000:00:04.0   2-edge      gve-ntfy-blk1@pci:0000:00:04.0
 93:          5          0   PCI-MSIX-0000:00:04.0   3-edge      gve-ntfy-blk2@pci:0000:00:04.0
 94:          5          0   PCI-MSIX-0000:00:04.0   4-edge      gve-ntfy-blk3@pci:0000:00:04.0
NMI:          0          0   Non-maskable interrupts
LOC:       1000       1000   Local timer interrupts
";

    fn dev(driver: &str, bus: &str, msi: &[u32]) -> Device {
        Device {
            driver: Some(driver.into()),
            bus_id: Some(bus.into()),
            msi_irqs: msi.to_vec(),
        }
    }

    fn irqs(ifname: &str, d: &Device, queues: u32) -> Vec<Option<u32>> {
        rx_queue_irqs(ifname, d, &parse_interrupts(INTERRUPTS), queues)
    }

    #[test]
    fn the_table_parses() {
        let l = parse_interrupts(INTERRUPTS);
        assert_eq!(
            l.first(),
            Some(&IrqLine {
                irq: 0,
                name: "timer".into()
            })
        );
        assert!(l.iter().all(|x| x.name != "interrupts"), "NMI/LOC skipped");
    }

    #[test]
    fn virtio_net_input_vectors_of_its_own_device() {
        // Two virtio NICs: each finds its own device's input vectors, not the other's.
        let a = dev("virtio_net", "virtio0", &[24, 25, 26, 27, 28]);
        assert_eq!(irqs("ens3", &a, 2), vec![Some(25), Some(27)]);
        let b = dev("virtio_net", "virtio1", &[29, 30]);
        assert_eq!(irqs("ens4", &b, 2), vec![Some(30), None]);
    }

    #[test]
    fn mlx5_completion_vectors() {
        let d = dev("mlx5_core", "0000:03:00.0", &[40, 41, 42]);
        assert_eq!(irqs("enp3s0f0np0", &d, 2), vec![Some(41), Some(42)]);
    }

    #[test]
    fn intel_txrx_vectors() {
        let ice = dev("ice", "0000:5e:00.0", &[50, 51, 52]);
        assert_eq!(irqs("ens1f0", &ice, 2), vec![Some(51), Some(52)]);
        let i40e = dev("i40e", "0000:3b:00.0", &[60, 61, 62]);
        assert_eq!(irqs("eno1", &i40e, 2), vec![Some(61), Some(62)]);
        let ixgbe = dev("ixgbe", "0000:04:00.0", &[70, 71, 72]);
        assert_eq!(irqs("enp4s0f0", &ixgbe, 3), vec![Some(70), Some(71), None]);
    }

    #[test]
    fn ena_and_gve() {
        let ena = dev("ena", "0000:00:05.0", &[80, 81, 82]);
        assert_eq!(irqs("ens5", &ena, 2), vec![Some(81), Some(82)]);
        // Four notification blocks: 0-1 serve TX, 2-3 RX.
        let gve = dev("gve", "0000:00:04.0", &[90, 91, 92, 93, 94]);
        assert_eq!(irqs("ens4", &gve, 2), vec![Some(93), Some(94)]);
    }

    #[test]
    fn unknown_drivers_fall_back_to_the_vectors_named_after_the_interface() {
        let d = Device {
            driver: Some("foo".into()),
            bus_id: None,
            msi_irqs: Vec::new(),
        };
        let lines =
            parse_interrupts(" 5: 1 1 PCI-MSI eth9-queue-a\n 6: 1 1 PCI-MSI eth9-queue-b\n");
        assert_eq!(rx_queue_irqs("eth9", &d, &lines, 2), vec![Some(5), Some(6)]);
        // veth: no device, no vectors.
        assert_eq!(
            rx_queue_irqs(
                "veth0",
                &Device::default(),
                &parse_interrupts(INTERRUPTS),
                1
            ),
            vec![None]
        );
    }
}
