//! The machine as the planner sees it: packages, NUMA nodes, L3 groups, cores, hardware
//! threads; each interface's NUMA node; each queue's interrupt CPU.
//!
//! [`Machine`] is plain data, loaded once through hwlocality (the running machine, an hwloc
//! synthetic string, or an XML export of another machine) so that the planner and its tests
//! never touch hwloc or the host. Interface and interrupt facts come from sysfs and procfs.
use std::collections::BTreeMap;
use std::path::Path;

use hwlocality::object::types::ObjectType;
use hwlocality::object::TopologyObject;
use hwlocality::Topology;

/// Loading a topology failed.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// hwloc refused the synthetic description.
    #[error("hwloc synthetic topology `{0}` is not valid (e.g. \"pack:2 [numa] core:4 pu:2\")")]
    Synthetic(String),
    /// hwloc could not read the XML file.
    #[error("hwloc XML topology {path}: {why}")]
    Xml {
        /// File.
        path: String,
        /// hwloc's complaint.
        why: String,
    },
    /// hwloc failed to build the topology.
    #[error("hwloc: {0}")]
    Build(String),
}

/// Where the topology comes from.
#[derive(Debug, Clone)]
pub enum Source {
    /// This machine.
    Host,
    /// An hwloc synthetic description.
    Synthetic(String),
    /// An hwloc XML export.
    Xml(std::path::PathBuf),
}

/// One hardware thread.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pu {
    /// OS CPU number.
    pub cpu: usize,
    /// Core (logical index, machine-wide).
    pub core: usize,
    /// Package (logical index).
    pub package: usize,
    /// NUMA node (OS index), if any.
    pub node: Option<usize>,
    /// L3 cache group (logical index), if any.
    pub l3: Option<usize>,
}

/// The machine.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Machine {
    /// Where it came from.
    pub source: String,
    /// Every hardware thread, by CPU number.
    pub pus: Vec<Pu>,
    /// NUMA nodes (OS indices).
    pub nodes: Vec<usize>,
    /// Number of packages.
    pub packages: usize,
}

fn ancestor_index(o: &TopologyObject, ty: ObjectType) -> Option<usize> {
    o.first_ancestor_with_type(ty).map(|a| a.logical_index())
}

impl Machine {
    /// Loads a topology.
    pub fn load(source: &Source) -> Result<Machine, TopologyError> {
        let b = Topology::builder();
        let (b, name) = match source {
            Source::Host => (b, "this machine".to_string()),
            Source::Synthetic(s) => (
                b.from_synthetic(s)
                    .map_err(|_| TopologyError::Synthetic(s.clone()))?,
                format!("synthetic \"{s}\""),
            ),
            Source::Xml(p) => (
                b.from_xml_file(p).map_err(|e| TopologyError::Xml {
                    path: p.display().to_string(),
                    why: e.to_string(),
                })?,
                format!("xml {}", p.display()),
            ),
        };
        let topo = b.build().map_err(|e| TopologyError::Build(e.to_string()))?;
        Ok(Self::from_hwloc(&topo, name))
    }

    fn from_hwloc(topo: &Topology, source: String) -> Machine {
        let numa: Vec<(usize, Vec<usize>)> = topo
            .objects_with_type(ObjectType::NUMANode)
            .map(|n| {
                let cpus = n
                    .cpuset()
                    .map(|c| c.iter_set().map(usize::from).collect())
                    .unwrap_or_default();
                (n.os_index().unwrap_or(n.logical_index()), cpus)
            })
            .collect();
        let pus = topo
            .objects_with_type(ObjectType::PU)
            .map(|p| {
                let cpu = p.os_index().unwrap_or(p.logical_index());
                Pu {
                    cpu,
                    core: ancestor_index(p, ObjectType::Core).unwrap_or(cpu),
                    package: ancestor_index(p, ObjectType::Package).unwrap_or(0),
                    node: numa
                        .iter()
                        .find(|(_, cpus)| cpus.contains(&cpu))
                        .map(|(n, _)| *n),
                    l3: ancestor_index(p, ObjectType::L3Cache),
                }
            })
            .collect::<Vec<_>>();
        Machine {
            source,
            packages: topo.objects_with_type(ObjectType::Package).count().max(1),
            nodes: numa.iter().map(|(n, _)| *n).collect(),
            pus,
        }
    }

    /// The hardware thread with this CPU number.
    pub(crate) fn pu(&self, cpu: usize) -> Option<&Pu> {
        self.pus.iter().find(|p| p.cpu == cpu)
    }

    /// The other hardware threads of `cpu`'s core.
    pub(crate) fn siblings(&self, cpu: usize) -> Vec<usize> {
        let Some(me) = self.pu(cpu) else {
            return Vec::new();
        };
        self.pus
            .iter()
            .filter(|p| p.core == me.core && p.cpu != cpu)
            .map(|p| p.cpu)
            .collect()
    }

    /// True when some core has more than one hardware thread.
    pub(crate) fn has_smt(&self) -> bool {
        let mut per_core: BTreeMap<usize, usize> = BTreeMap::new();
        for p in &self.pus {
            *per_core.entry(p.core).or_default() += 1;
        }
        per_core.values().any(|n| *n > 1)
    }

    /// Number of cores.
    pub(crate) fn cores(&self) -> usize {
        let mut c: Vec<usize> = self.pus.iter().map(|p| p.core).collect();
        c.sort_unstable();
        c.dedup();
        c.len()
    }

    /// One line per package/node/core, for `dataplane topology`.
    pub fn render(&self) -> String {
        let mut s = format!(
            "{}: {} package(s), {} NUMA node(s), {} core(s), {} hardware thread(s){}\n",
            self.source,
            self.packages,
            self.nodes.len(),
            self.cores(),
            self.pus.len(),
            if self.has_smt() {
                " (SMT)"
            } else {
                " (no SMT)"
            }
        );
        let mut by_core: BTreeMap<(usize, Option<usize>, usize), Vec<usize>> = BTreeMap::new();
        for p in &self.pus {
            by_core
                .entry((p.package, p.node, p.core))
                .or_default()
                .push(p.cpu);
        }
        for ((pkg, node, core), cpus) in by_core {
            s.push_str(&format!(
                "  package {pkg} node {} core {core}: cpus {cpus:?}\n",
                node.map_or("-".to_string(), |n| n.to_string())
            ));
        }
        s
    }
}

/// An interface's NUMA node from sysfs (`device/numa_node`); None for virtual devices (veth)
/// or machines that do not say.
pub fn interface_node(ifname: &str) -> Option<usize> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{ifname}/device/numa_node")).ok()?;
    s.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .map(|n| n as usize)
}

/// How a queue's receive work reaches a CPU.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum IrqSource {
    /// A hardware interrupt: IRQ number and the CPUs in its smp_affinity_list.
    Irq {
        /// IRQ number.
        irq: u32,
        /// Allowed CPUs.
        cpus: Vec<usize>,
        /// The CPUs the interrupt is delivered to now (`effective_affinity_list`: on x86 one
        /// CPU of the allowed ones; empty where the kernel does not say, or in JSON written
        /// before this field existed).
        #[serde(default)]
        effective: Vec<usize>,
    },
    /// A threaded-NAPI kernel thread (`napi/<dev>-<id>`), and the CPUs it may run on.
    NapiThread {
        /// Thread id.
        tid: u32,
        /// Thread name.
        name: String,
        /// Allowed CPUs.
        cpus: Vec<usize>,
    },
}

/// Parses a cpu list like `0-3,8,10-11`.
pub(crate) fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                out.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse::<usize>().ok()?)
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// A thread's name (`/proc/TID/comm`).
pub(crate) fn thread_name(tid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Allowed CPUs of a thread, from `/proc/TID/status`.
pub fn thread_cpus(tid: u32) -> Option<Vec<usize>> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("Cpus_allowed_list:"))?;
    parse_cpu_list(line.split_once(':')?.1)
}

/// Threaded-NAPI kthreads of an interface, ordered by NAPI id (= queue order for veth).
pub fn napi_threads(ifname: &str) -> Vec<(u32, String)> {
    let prefix = format!("napi/{ifname}-");
    let mut out: Vec<(u64, u32, String)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(tid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(comm) = std::fs::read_to_string(e.path().join("comm")) else {
                continue;
            };
            let comm = comm.trim();
            if let Some(id) = comm.strip_prefix(&prefix) {
                out.push((id.parse().unwrap_or(u64::MAX), tid, comm.to_string()));
            }
        }
    }
    out.sort();
    out.into_iter().map(|(_, tid, name)| (tid, name)).collect()
}

/// Where queue `queue` of `ifname` takes its receive work: its IRQ (found by the driver's
/// naming of its vectors, `placement::queue_irqs`), else its threaded-NAPI kthread.
pub fn queue_irq(ifname: &str, queue: u32) -> Option<IrqSource> {
    let lines = std::fs::read_to_string("/proc/interrupts")
        .map(|t| crate::placement::queue_irqs::parse_interrupts(&t))
        .unwrap_or_default();
    let dev = crate::placement::queue_irqs::device(ifname);
    let irq = crate::placement::queue_irqs::rx_queue_irqs(ifname, &dev, &lines, queue + 1)
        .get(queue as usize)
        .copied()
        .flatten();
    if let Some(irq) = irq {
        let list = |file: &str| {
            std::fs::read_to_string(format!("/proc/irq/{irq}/{file}"))
                .ok()
                .and_then(|s| parse_cpu_list(&s))
                .unwrap_or_default()
        };
        return Some(IrqSource::Irq {
            irq,
            cpus: list("smp_affinity_list"),
            effective: list("effective_affinity_list"),
        });
    }
    let (tid, name) = napi_threads(ifname).into_iter().nth(queue as usize)?;
    Some(IrqSource::NapiThread {
        cpus: thread_cpus(tid).unwrap_or_default(),
        tid,
        name,
    })
}

/// The interface's driver (None for a virtual interface such as veth).
pub(crate) fn interface_driver(ifname: &str) -> Option<String> {
    crate::placement::queue_irqs::device(ifname).driver
}

impl IrqSource {
    /// The CPU this source's work runs on: the one it is pinned to, or for an interrupt
    /// allowed on several CPUs the one the kernel delivers it to now (a driver's default
    /// spread, as virtio_net's, pins nothing but still lands on one CPU).
    pub fn cpu(&self) -> Option<usize> {
        let one = |cpus: &[usize]| (cpus.len() == 1).then(|| cpus[0]);
        match self {
            IrqSource::Irq {
                cpus, effective, ..
            } => one(cpus).or_else(|| one(effective)),
            IrqSource::NapiThread { cpus, .. } => one(cpus),
        }
    }
}

/// One network interface as `dataplane topology` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InterfaceInfo {
    /// Interface name.
    pub name: String,
    /// Its NUMA node, where the device says.
    pub numa_node: Option<usize>,
    /// Number of RX queues.
    pub rx_queues: u32,
    /// Per queue, where its receive work runs (None: no IRQ and no NAPI thread).
    pub queue_irqs: Vec<Option<IrqSource>>,
    /// Its driver (None: a virtual interface such as veth).
    pub driver: Option<String>,
}

/// Every interface of the current network namespace but `lo`, by name.
pub fn interfaces() -> Vec<InterfaceInfo> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter(|n| n != "lo")
        .map(|name| {
            let rx_queues = crate::sys::rx_queue_count(&name).unwrap_or(0);
            InterfaceInfo {
                numa_node: interface_node(&name),
                queue_irqs: (0..rx_queues).map(|q| queue_irq(&name, q)).collect(),
                driver: interface_driver(&name),
                rx_queues,
                name,
            }
        })
        .collect()
}

/// Reads an XML topology from a file path (helper for the CLI).
pub fn source_from_args(synthetic: Option<String>, xml: Option<&Path>) -> Source {
    match (synthetic, xml) {
        (Some(s), _) => Source::Synthetic(s),
        (None, Some(p)) => Source::Xml(p.to_path_buf()),
        (None, None) => Source::Host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_two_socket_smt() {
        let m =
            Machine::load(&Source::Synthetic("pack:2 [numa] core:4 pu:2".into())).expect("valid");
        assert_eq!(m.pus.len(), 16);
        assert_eq!(m.packages, 2);
        assert_eq!(m.nodes.len(), 2);
        assert_eq!(m.cores(), 8);
        assert!(m.has_smt());
        let p0 = m.pu(0).expect("cpu 0");
        assert_eq!(m.siblings(0).len(), 1);
        let sib = m.pu(m.siblings(0)[0]).expect("sibling");
        assert_eq!(
            (sib.core, sib.package, sib.node),
            (p0.core, p0.package, p0.node)
        );
        let last = m.pu(15).expect("cpu 15");
        assert_ne!(last.node, p0.node);
    }

    #[test]
    fn synthetic_four_nodes_one_package() {
        let m = Machine::load(&Source::Synthetic(
            "pack:1 group:4 [numa] core:2 pu:2".into(),
        ))
        .expect("valid");
        assert_eq!(
            (m.packages, m.nodes.len(), m.cores(), m.pus.len()),
            (1, 4, 8, 16)
        );
    }

    #[test]
    fn bad_synthetic_is_an_error() {
        let e = Machine::load(&Source::Synthetic("pack:two".into())).expect_err("invalid");
        assert!(e.to_string().contains("pack:two"));
    }

    #[test]
    fn host_topology_loads() {
        let m = Machine::load(&Source::Host).expect("host");
        assert!(!m.pus.is_empty());
        assert_eq!(
            m.pus.len(),
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-2,5,7-8\n"), Some(vec![0, 1, 2, 5, 7, 8]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
