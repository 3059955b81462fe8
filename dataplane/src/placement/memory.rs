//! A poller's memory policy (`mbind`): its UMEM and rings on its own node, another node
//! (an ablation), or interleaved, from the CPU the plan pinned it to.
use crate::config::MemoryPlacement;
use crate::placement::topology::Machine;
use crate::sys;

/// A memory placement the machine cannot give.
#[derive(Debug, thiserror::Error)]
#[error("config key `dataplane.memory` = {placement}: {why}")]
pub struct MemoryError {
    /// The placement asked for.
    pub placement: &'static str,
    /// Why it cannot be given.
    pub why: String,
}

/// The mbind policy for a poller pinned to `cpu` (None: leave it to first touch).
pub fn policy(
    m: &Machine,
    placement: MemoryPlacement,
    cpu: Option<usize>,
) -> Result<Option<(sys::MemPolicy, Vec<usize>)>, MemoryError> {
    let node = cpu.and_then(|c| m.pu(c)).and_then(|p| p.node);
    let refuse = |why: String| MemoryError {
        placement: "remote",
        why,
    };
    Ok(match placement {
        MemoryPlacement::Local => node.map(|n| (sys::MemPolicy::Bind(n), vec![n])),
        MemoryPlacement::Remote => {
            let other = m.nodes.iter().copied().find(|n| Some(*n) != node);
            match (node, other) {
                (Some(_), Some(o)) => Some((sys::MemPolicy::Bind(o), vec![o])),
                (None, _) => {
                    return Err(refuse(
                        "the poller is not pinned, so it has no node to be remote from".into(),
                    ))
                }
                (_, None) => {
                    return Err(refuse(format!(
                        "this machine has {} NUMA node(s)",
                        m.nodes.len()
                    )))
                }
            }
        }
        MemoryPlacement::Interleave => Some((sys::MemPolicy::Interleave, m.nodes.clone())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::topology::Source;

    fn machine(s: &str) -> Machine {
        Machine::load(&Source::Synthetic(s.into())).expect("valid synthetic topology")
    }

    #[test]
    fn remote_memory_is_the_other_node_and_refused_where_there_is_none() {
        // Two nodes of two single-threaded cores: CPUs 0-1 on node 0, 2-3 on node 1.
        let two = machine("pack:2 [numa] core:2 pu:1");
        let remote = |m: &Machine, cpu| policy(m, MemoryPlacement::Remote, cpu);
        assert_eq!(
            remote(&two, Some(0)).expect("two nodes"),
            Some((sys::MemPolicy::Bind(1), vec![1]))
        );
        assert_eq!(
            remote(&two, Some(3)).expect("two nodes"),
            Some((sys::MemPolicy::Bind(0), vec![0]))
        );
        assert_eq!(
            policy(&two, MemoryPlacement::Local, Some(3)).expect("local"),
            Some((sys::MemPolicy::Bind(1), vec![1]))
        );
        let unpinned = remote(&two, None).expect_err("no node to be remote from");
        assert!(unpinned.to_string().contains("not pinned"), "{unpinned}");
        let one = machine("pack:1 [numa] core:2 pu:1");
        let e = remote(&one, Some(0)).expect_err("one node");
        assert!(
            e.to_string().contains("remote") && e.to_string().contains("1 NUMA node"),
            "{e}"
        );
    }
}
