//! Layout policies: which CPU polls which queue, and on which NUMA node its memory lives.
//!
//! Pure: a [`Machine`] and the queues' interrupt CPUs in, a [`Plan`] (or a reason why this
//! machine cannot give the layout) out. A layout the topology cannot give is an error, never a
//! silent fallback. A poller binds queue `q` on every interface, so the plan is per queue id.
use std::collections::BTreeSet;

use crate::placement::topology::{Machine, Pu};

/// The layouts (named after the seeds' experiments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layout {
    /// Poller on the CPU that takes the queue's interrupts.
    IrqCore,
    /// Poller on the other hardware thread of the interrupt CPU's core.
    SmtSibling,
    /// Poller on another core of the interrupt CPU's package (same node preferred).
    SamePackage,
    /// Poller on a core of another NUMA node.
    RemoteNode,
    /// One poller per queue over the interface's node, no two on one core; interrupts moved to
    /// the poller's CPU.
    Spread,
    /// The config names each poller's CPU.
    Explicit,
    /// Not pinned: the scheduler decides (the baseline for "SMP affinity helps").
    Unpinned,
}

impl Layout {
    /// All layouts.
    pub const ALL: [Layout; 7] = [
        Layout::IrqCore,
        Layout::SmtSibling,
        Layout::SamePackage,
        Layout::RemoteNode,
        Layout::Spread,
        Layout::Explicit,
        Layout::Unpinned,
    ];

    /// The kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            Layout::IrqCore => "irq-core",
            Layout::SmtSibling => "smt-sibling",
            Layout::SamePackage => "same-package",
            Layout::RemoteNode => "remote-node",
            Layout::Spread => "spread",
            Layout::Explicit => "explicit",
            Layout::Unpinned => "unpinned",
        }
    }

    /// Parses a kebab-case name.
    pub fn parse(s: &str) -> Option<Layout> {
        Self::ALL.iter().copied().find(|l| l.name() == s)
    }

    fn needs_irq(self) -> bool {
        matches!(
            self,
            Layout::IrqCore | Layout::SmtSibling | Layout::SamePackage | Layout::RemoteNode
        )
    }
}

/// Why a layout cannot be planned here.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// The queue's interrupt CPU is unknown and the layout is defined relative to it.
    #[error("layout {layout}: the interrupt CPU of queue {queue} is unknown (no IRQ found that is pinned to, or delivered to, one CPU, and no pinned NAPI thread; on veth the sender's CPU plays it): pass --irq-cpu {queue}:CPU")]
    IrqUnknown {
        /// Layout name.
        layout: &'static str,
        /// Queue.
        queue: u32,
    },
    /// A CPU that does not exist in this topology.
    #[error("CPU {cpu} ({what}) does not exist in this topology (CPUs {first}..={last})")]
    NoSuchCpu {
        /// CPU.
        cpu: usize,
        /// Where it came from.
        what: String,
        /// Lowest CPU.
        first: usize,
        /// Highest CPU.
        last: usize,
    },
    /// The machine lacks what the layout needs.
    #[error("layout {layout} is not possible on this machine: {why}")]
    Impossible {
        /// Layout name.
        layout: &'static str,
        /// Why.
        why: String,
    },
}

/// One queue to place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueIn {
    /// Queue id.
    pub queue: u32,
    /// CPU taking its interrupts (or NAPI thread), if known or overridden.
    pub irq_cpu: Option<usize>,
    /// CPU the config names for the poller owning it (layout `explicit`).
    pub config_cpu: Option<usize>,
}

/// The placement of one queue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlanEntry {
    /// Queue id.
    pub queue: u32,
    /// Interrupt CPU (after the plan: spread moves it to the poller).
    pub irq_cpu: Option<usize>,
    /// True when the plan moves the interrupt (spread); applied with `--apply-irq`.
    pub irq_moved: bool,
    /// Poller CPU (None: unpinned).
    pub poller_cpu: Option<usize>,
    /// NUMA node of the poller's memory (None: first touch, wherever the thread runs).
    pub mem_node: Option<usize>,
}

/// A plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Plan {
    /// Layout.
    pub layout: Layout,
    /// One entry per queue.
    pub entries: Vec<PlanEntry>,
    /// Things an operator should know (remote memory, shared cores, pollers on interrupt CPUs).
    pub warnings: Vec<String>,
}

fn check_cpu(m: &Machine, cpu: usize, what: String) -> Result<(), PlanError> {
    if m.pu(cpu).is_some() {
        return Ok(());
    }
    Err(PlanError::NoSuchCpu {
        cpu,
        what,
        first: m.pus.iter().map(|p| p.cpu).min().unwrap_or(0),
        last: m.pus.iter().map(|p| p.cpu).max().unwrap_or(0),
    })
}

/// Plans `layout` for `queues` on `m`; `iface_node` is the interfaces' NUMA node if known.
pub fn plan(
    m: &Machine,
    queues: &[QueueIn],
    iface_node: Option<usize>,
    layout: Layout,
) -> Result<Plan, PlanError> {
    check_queues(m, queues, layout)?;
    let entries = if layout == Layout::Spread {
        spread(m, queues, iface_node)?
    } else {
        let irq_cpus: BTreeSet<usize> = queues.iter().filter_map(|q| q.irq_cpu).collect();
        let mut used_cores: BTreeSet<usize> = BTreeSet::new();
        let mut entries = Vec::with_capacity(queues.len());
        for q in queues {
            let poller = poller_cpu(m, q, layout, &irq_cpus, &used_cores)?;
            if let Some(core) = poller.and_then(|c| m.pu(c)).map(|p| p.core) {
                used_cores.insert(core);
            }
            entries.push(PlanEntry {
                queue: q.queue,
                irq_cpu: q.irq_cpu,
                irq_moved: false,
                poller_cpu: poller,
                mem_node: poller.and_then(|c| m.pu(c)).and_then(|p| p.node),
            });
        }
        entries
    };
    let warnings = warnings(m, &entries, iface_node);
    Ok(Plan {
        layout,
        entries,
        warnings,
    })
}

/// The queues' interrupt CPUs exist, and are known where the layout is placed by them.
fn check_queues(m: &Machine, queues: &[QueueIn], layout: Layout) -> Result<(), PlanError> {
    for q in queues {
        if let Some(c) = q.irq_cpu {
            check_cpu(m, c, format!("interrupt CPU of queue {}", q.queue))?;
        }
        if layout.needs_irq() && q.irq_cpu.is_none() {
            return Err(PlanError::IrqUnknown {
                layout: layout.name(),
                queue: q.queue,
            });
        }
    }
    Ok(())
}

fn impossible(layout: Layout, why: String) -> PlanError {
    PlanError::Impossible {
        layout: layout.name(),
        why,
    }
}

/// The first hardware thread of each core that has a thread passing `filter`, in CPU order:
/// one poller per core.
fn first_threads(m: &Machine, filter: impl Fn(&Pu) -> bool) -> Vec<usize> {
    let mut seen = BTreeSet::new();
    let mut pus: Vec<_> = m.pus.iter().filter(|p| filter(p)).collect();
    pus.sort_by_key(|p| p.cpu);
    pus.into_iter()
        .filter(|p| seen.insert(p.core))
        .map(|p| p.cpu)
        .collect()
}

/// `spread`: queue i's interrupt and poller on the i-th core of the interface's node; a NIC
/// that names no node (a virtual device) is as near to every node, so over all of them.
fn spread(
    m: &Machine,
    queues: &[QueueIn],
    node: Option<usize>,
) -> Result<Vec<PlanEntry>, PlanError> {
    let cpus = first_threads(m, |p| node.is_none() || p.node == node);
    if queues.len() > cpus.len() {
        return Err(impossible(
            Layout::Spread,
            format!(
                "{} queues but {} has {} cores (one poller per core)",
                queues.len(),
                node.map_or("the machine".into(), |n| format!("node {n}")),
                cpus.len()
            ),
        ));
    }
    Ok(queues
        .iter()
        .zip(cpus)
        .map(|(q, cpu)| PlanEntry {
            queue: q.queue,
            irq_cpu: Some(cpu),
            irq_moved: q.irq_cpu != Some(cpu),
            poller_cpu: Some(cpu),
            mem_node: m.pu(cpu).and_then(|p| p.node),
        })
        .collect())
}

/// Where `layout` puts the poller of queue `q` (None: not pinned), the interrupt left where
/// it is; `used_cores` are the cores earlier queues' pollers took.
fn poller_cpu(
    m: &Machine,
    q: &QueueIn,
    layout: Layout,
    irq_cpus: &BTreeSet<usize>,
    used_cores: &BTreeSet<usize>,
) -> Result<Option<usize>, PlanError> {
    let irq = q.irq_cpu;
    Ok(match layout {
        Layout::Unpinned | Layout::Spread => None,
        Layout::Explicit => {
            let c = q.config_cpu.ok_or_else(|| {
                impossible(
                    layout,
                    format!(
                        "the config gives no cpu for the poller of queue {}",
                        q.queue
                    ),
                )
            })?;
            check_cpu(m, c, format!("config cpu of queue {}", q.queue))?;
            Some(c)
        }
        Layout::IrqCore => irq,
        Layout::SmtSibling => {
            let c = irq.unwrap_or_default();
            let sibs = m.siblings(c);
            if sibs.is_empty() {
                return Err(impossible(
                    layout,
                    format!("CPU {c}'s core has one hardware thread (no SMT)"),
                ));
            }
            Some(sibs[0])
        }
        Layout::SamePackage | Layout::RemoteNode => Some(core_apart(
            m,
            q,
            layout,
            irq.unwrap_or_default(),
            irq_cpus,
            used_cores,
        )?),
    })
}

/// `same-package` / `remote-node`: a core other than that of the interrupt CPU `c`, in its
/// package (preferring its node) or on another node. Preferred: cores free and taking no
/// interrupts; then free cores; never a core another poller has.
fn core_apart(
    m: &Machine,
    q: &QueueIn,
    layout: Layout,
    c: usize,
    irq_cpus: &BTreeSet<usize>,
    used_cores: &BTreeSet<usize>,
) -> Result<usize, PlanError> {
    let core_of = |cpu: usize| m.pu(cpu).map(|p| p.core);
    let me = m
        .pu(c)
        .cloned()
        .ok_or_else(|| impossible(layout, format!("CPU {c} unknown")))?;
    if layout == Layout::RemoteNode && m.nodes.len() < 2 {
        return Err(impossible(
            layout,
            format!("it has {} NUMA node(s)", m.nodes.len()),
        ));
    }
    let fits = |p: &Pu| {
        p.core != me.core
            && if layout == Layout::SamePackage {
                p.package == me.package
            } else {
                p.node.is_some() && p.node != me.node
            }
    };
    let mut cands = first_threads(m, fits);
    cands.sort_by_key(|&cpu| {
        let p = m.pu(cpu);
        (
            used_cores.contains(&core_of(cpu).unwrap_or(usize::MAX)),
            irq_cpus.iter().any(|i| core_of(*i) == core_of(cpu)),
            layout == Layout::SamePackage && p.map(|p| p.node) != Some(me.node),
            cpu,
        )
    });
    cands
        .into_iter()
        .find(|cpu| !used_cores.contains(&core_of(*cpu).unwrap_or(usize::MAX)))
        .ok_or_else(|| {
            impossible(
                layout,
                format!(
                    "no free core {} CPU {c} for queue {}",
                    if layout == Layout::SamePackage {
                        "in the package of"
                    } else {
                        "on a node other than that of"
                    },
                    q.queue
                ),
            )
        })
}

fn warnings(m: &Machine, entries: &[PlanEntry], iface_node: Option<usize>) -> Vec<String> {
    let mut w = Vec::new();
    let irq: BTreeSet<usize> = entries.iter().filter_map(|e| e.irq_cpu).collect();
    for (i, e) in entries.iter().enumerate() {
        if let (Some(mem), Some(nic)) = (e.mem_node, iface_node) {
            if mem != nic {
                w.push(format!("queue {}: poller memory on node {mem}, interface on node {nic} (remote memory)", e.queue));
            }
        }
        if let Some(c) = e.poller_cpu {
            if irq.contains(&c) {
                w.push(format!(
                    "queue {}: poller on CPU {c}, which takes interrupts",
                    e.queue
                ));
            }
            let core = m.pu(c).map(|p| p.core);
            for o in &entries[i + 1..] {
                if let Some(oc) = o.poller_cpu {
                    if m.pu(oc).map(|p| p.core) == core {
                        w.push(format!(
                            "queues {} and {}: pollers on CPUs {c} and {oc} share a core",
                            e.queue, o.queue
                        ));
                    }
                }
            }
        }
    }
    w
}

impl Plan {
    /// The entry that places a poller serving `queues`: its first queue's (a poller runs
    /// where its first queue is placed, and takes its memory node).
    pub fn poller_entry(&self, queues: &[u32]) -> Option<&PlanEntry> {
        let first = queues.first()?;
        self.entries.iter().find(|e| e.queue == *first)
    }

    /// The table `dataplane plan` prints, one row per interface and queue.
    pub fn render(&self, interfaces: &[String]) -> String {
        let mut s = format!(
            "layout {}\n{:<16} {:>5} {:>8} {:>10} {:>8}\n",
            self.layout.name(),
            "iface",
            "queue",
            "irq cpu",
            "poller cpu",
            "mem node"
        );
        let opt = |o: Option<usize>| o.map_or("-".to_string(), |v| v.to_string());
        for e in &self.entries {
            for i in interfaces {
                s.push_str(&format!(
                    "{:<16} {:>5} {:>8} {:>10} {:>8}\n",
                    i,
                    e.queue,
                    format!("{}{}", opt(e.irq_cpu), if e.irq_moved { "*" } else { "" }),
                    opt(e.poller_cpu),
                    opt(e.mem_node)
                ));
            }
        }
        if self.entries.iter().any(|e| e.irq_moved) {
            s.push_str("* interrupts moved to this CPU (applied with --apply-irq)\n");
        }
        for w in &self.warnings {
            s.push_str(&format!("warning: {w}\n"));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::topology::Source;

    fn machine(s: &str) -> Machine {
        Machine::load(&Source::Synthetic(s.into())).expect("valid synthetic topology")
    }

    fn q(queue: u32, irq: usize) -> QueueIn {
        QueueIn {
            queue,
            irq_cpu: Some(irq),
            config_cpu: None,
        }
    }

    fn pollers(p: &Plan) -> Vec<Option<usize>> {
        p.entries.iter().map(|e| e.poller_cpu).collect()
    }

    /// The seed's Nehalem: 2 sockets, one node each, 4 cores, 2 threads.
    #[test]
    fn nehalem_two_sockets() {
        let m = machine("pack:2 [numa] core:4 pu:2");
        let qs = [q(0, 0), q(1, 2)];
        let node_of = |c: usize| m.pu(c).and_then(|p| p.node);
        let p = plan(&m, &qs, Some(node_of(0).unwrap()), Layout::IrqCore).unwrap();
        assert_eq!(pollers(&p), vec![Some(0), Some(2)]);
        assert!(p.warnings.iter().any(|w| w.contains("takes interrupts")));
        let p = plan(&m, &qs, None, Layout::SmtSibling).unwrap();
        assert_eq!(pollers(&p), vec![Some(1), Some(3)]);
        assert_eq!(m.pu(1).unwrap().core, m.pu(0).unwrap().core);
        let p = plan(&m, &qs, None, Layout::SamePackage).unwrap();
        for (e, irq) in p.entries.iter().zip([0, 2]) {
            let (pc, ic) = (m.pu(e.poller_cpu.unwrap()).unwrap(), m.pu(irq).unwrap());
            assert_eq!(pc.package, ic.package);
            assert_ne!(pc.core, ic.core);
            assert_ne!(
                pc.core,
                m.pu(2 - irq).unwrap().core,
                "avoids the other queue's interrupt core"
            );
        }
        assert_ne!(p.entries[0].poller_cpu, p.entries[1].poller_cpu);
        let p = plan(&m, &qs, Some(node_of(0).unwrap()), Layout::RemoteNode).unwrap();
        for e in &p.entries {
            assert_ne!(e.mem_node, node_of(0));
            assert_eq!(
                e.mem_node,
                m.pu(e.poller_cpu.unwrap()).unwrap().node,
                "memory follows the poller"
            );
        }
        assert!(p.warnings.iter().any(|w| w.contains("remote memory")));
        let p = plan(
            &m,
            &[q(0, 5), q(1, 5), q(2, 5)],
            Some(node_of(8).unwrap()),
            Layout::Spread,
        )
        .unwrap();
        let cores: BTreeSet<usize> = p
            .entries
            .iter()
            .map(|e| m.pu(e.poller_cpu.unwrap()).unwrap().core)
            .collect();
        assert_eq!(cores.len(), 3, "no two pollers on one core");
        for e in &p.entries {
            assert_eq!(
                e.mem_node,
                node_of(8),
                "spread stays on the interface's node"
            );
            assert_eq!(e.irq_cpu, e.poller_cpu, "interrupts aligned to the poller");
            assert!(e.irq_moved);
        }
        assert!(
            !p.warnings
                .iter()
                .any(|w| w.contains("remote") || w.contains("share")),
            "{:?}",
            p.warnings
        );
        let p = plan(&m, &qs, None, Layout::Unpinned).unwrap();
        assert_eq!(pollers(&p), vec![None, None]);
        let qe = [QueueIn {
            queue: 0,
            irq_cpu: None,
            config_cpu: Some(7),
        }];
        assert_eq!(
            pollers(&plan(&m, &qe, None, Layout::Explicit).unwrap()),
            vec![Some(7)]
        );
        let too_many: Vec<QueueIn> = (0..5).map(|i| q(i, 0)).collect();
        let e = plan(&m, &too_many, node_of(0), Layout::Spread).unwrap_err();
        assert!(e.to_string().contains("5 queues"), "{e}");
    }

    /// One package, four NUMA nodes, 8 cores, 2 threads.
    #[test]
    fn one_package_four_nodes() {
        let m = machine("pack:1 group:4 [numa] core:2 pu:2");
        let irq_node = m.pu(0).unwrap().node;
        let p = plan(&m, &[q(0, 0)], irq_node, Layout::SamePackage).unwrap();
        let pc = m.pu(p.entries[0].poller_cpu.unwrap()).unwrap();
        assert_eq!(
            pc.node, irq_node,
            "same package prefers the interrupt CPU's node"
        );
        assert_ne!(pc.core, m.pu(0).unwrap().core);
        let p = plan(&m, &[q(0, 0)], irq_node, Layout::RemoteNode).unwrap();
        assert_ne!(p.entries[0].mem_node, irq_node);
        let p = plan(&m, &[q(0, 0), q(1, 0), q(2, 0)], irq_node, Layout::Spread).unwrap_err();
        assert!(p.to_string().contains("has 2 cores"), "{p}");
        let p = plan(&m, &[q(0, 0)], irq_node, Layout::SmtSibling).unwrap();
        assert_eq!(pollers(&p), vec![Some(1)]);
    }

    /// Every layout on every machine shape: a plan, or an error that says why.
    #[test]
    fn every_layout_on_every_machine() {
        let shapes = [
            ("pack:2 [numa] core:4 pu:2", [true; 7]),
            ("pack:1 group:4 [numa] core:2 pu:2", [true; 7]),
            // irq-core, smt-sibling, same-package, remote-node, spread, explicit, unpinned
            (
                "pack:1 [numa] core:2 pu:1",
                [true, false, true, false, true, true, true],
            ),
        ];
        for (shape, possible) in shapes {
            let m = machine(shape);
            let qs = [QueueIn {
                queue: 0,
                irq_cpu: Some(0),
                config_cpu: Some(1),
            }];
            for (layout, ok) in Layout::ALL.iter().zip(possible) {
                match plan(&m, &qs, m.pu(0).and_then(|p| p.node), *layout) {
                    Ok(p) => {
                        assert!(
                            ok,
                            "{shape} {}: expected an error, got {p:?}",
                            layout.name()
                        );
                        let e = &p.entries[0];
                        if *layout != Layout::Unpinned {
                            let cpu = e.poller_cpu.expect("pinned");
                            assert_eq!(
                                e.mem_node,
                                m.pu(cpu).and_then(|p| p.node),
                                "memory on the poller's node"
                            );
                        }
                    }
                    Err(e) => assert!(!ok, "{shape} {}: {e}", layout.name()),
                }
            }
        }
    }

    /// This machine's shape: 2 cores, no SMT, one node.
    #[test]
    fn two_cores_no_smt() {
        let m = machine("pack:1 [numa] core:2 pu:1");
        let e = plan(&m, &[q(0, 0)], None, Layout::SmtSibling).unwrap_err();
        assert!(e.to_string().contains("no SMT"), "{e}");
        let e = plan(&m, &[q(0, 0)], None, Layout::RemoteNode).unwrap_err();
        assert!(e.to_string().contains("1 NUMA node"), "{e}");
        let p = plan(&m, &[q(0, 0)], None, Layout::SamePackage).unwrap();
        assert_eq!(pollers(&p), vec![Some(1)]);
        let p = plan(&m, &[q(0, 0)], None, Layout::IrqCore).unwrap();
        assert_eq!(pollers(&p), vec![Some(0)]);
        let e = plan(
            &m,
            &[QueueIn {
                queue: 0,
                irq_cpu: None,
                config_cpu: None,
            }],
            None,
            Layout::IrqCore,
        )
        .unwrap_err();
        assert!(e.to_string().contains("--irq-cpu 0:CPU"), "{e}");
        let e = plan(&m, &[q(0, 9)], None, Layout::IrqCore).unwrap_err();
        assert!(e.to_string().contains("CPU 9"), "{e}");
        let e = plan(&m, &[q(0, 0), q(1, 0)], None, Layout::SamePackage).unwrap_err();
        assert!(e.to_string().contains("no free core"), "{e}");
        let p = plan(&m, &[q(0, 1), q(1, 1)], None, Layout::Spread).unwrap();
        assert_eq!(pollers(&p), vec![Some(0), Some(1)]);
    }
}
