//! Where a task goes: a node with enough free slots, chosen by the pool's nodeFillType.

use super::pool::NodeFillType;

/// A node's free slots, as dispatch sees them during one pass.
#[derive(Clone, Debug)]
pub struct FreeNode {
    pub node_pk: i64,
    pub id: String,
    pub free: i32,
    /// Room for single-slot tasks beyond its free slots: they wait on the node, and start as
    /// its slots free (`--tasks-ahead-per-slot`).
    pub ahead: i32,
    /// False for a low-priority node.
    pub dedicated: bool,
}

impl FreeNode {
    /// A node of a pool with `slots` per node, `free` of them free (below zero: tasks wait on
    /// it already), that may hold `ahead` tasks per slot beyond them.
    pub fn new(node_pk: i64, id: String, (free, slots, ahead): (i32, i32, i32)) -> Self {
        Self {
            node_pk,
            id,
            free: free.max(0),
            ahead: (slots.saturating_mul(ahead) + free.min(0)).max(0),
            dedicated: true,
        }
    }
}

/// What a task asks of its node: `slots` free, and with `dedicated_only`, a dedicated node.
/// One with `own_container` runs in a container of its own, which the node's agent does not
/// start: it never waits on a node ([`place_ahead`]).
#[derive(Clone, Copy, Debug)]
pub struct Needs {
    pub slots: i32,
    pub dedicated_only: bool,
    pub own_container: bool,
}

/// What `--tasks-ahead-per-slot` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AheadSetting {
    /// Held tasks only for short jobs, on nodes that run only short jobs' tasks.
    Auto,
    /// This many a slot, for every single-slot task (0: none).
    Fixed(i32),
}

impl std::str::FromStr for AheadSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        match s.parse::<i32>() {
            Ok(n) if (0..=16).contains(&n) => Ok(Self::Fixed(n)),
            _ => Err(format!("{s:?}: give auto, or a number from 0 to 16")),
        }
    }
}

/// Picks a node for a task and takes its slots from it: the node `affinity` names (Azure's
/// affinityId, `TVM:<node id>`) if it has room, as a hint only; otherwise as [`place`] does.
pub fn place_near(
    nodes: &mut [FreeNode],
    needs: Needs,
    fill: NodeFillType,
    affinity: Option<&str>,
) -> Option<i64> {
    let wanted = affinity.and_then(|a| a.strip_prefix("TVM:"));
    let near = wanted.and_then(|id| nodes.iter_mut().find(|n| n.id == id && fits(n, needs)));
    match near {
        Some(node) => {
            node.free -= needs.slots;
            Some(node.node_pk)
        }
        None => place(nodes, needs, fill),
    }
}

/// Picks a node for a task and takes its slots from it. `spread`: the node with the most free
/// slots (ties: the first); `pack`: the fullest node that still fits.
pub fn place(nodes: &mut [FreeNode], needs: Needs, fill: NodeFillType) -> Option<i64> {
    let fitting = nodes.iter_mut().filter(|n| fits(n, needs));
    let chosen = match fill {
        NodeFillType::Spread => fitting.reduce(|best, n| if n.free > best.free { n } else { best }),
        NodeFillType::Pack => fitting.reduce(|best, n| if n.free < best.free { n } else { best }),
    }?;
    chosen.free -= needs.slots;
    Some(chosen.node_pk)
}

/// Picks a node to hold a single-slot task until one of its slots frees (when no node has one
/// free), and takes the room from it: the node with the most room, so that tasks wait on each
/// node about as long. Wider tasks, and tasks in containers of their own (which the node's
/// agent does not start), never wait on a node.
pub fn place_ahead(nodes: &mut [FreeNode], needs: Needs) -> Option<i64> {
    if needs.slots != 1 || needs.own_container {
        return None;
    }
    let fitting = nodes
        .iter_mut()
        .filter(|n| n.ahead > 0 && (n.dedicated || !needs.dedicated_only));
    let chosen = fitting.reduce(|best, n| if n.ahead > best.ahead { n } else { best })?;
    chosen.ahead -= 1;
    Some(chosen.node_pk)
}

/// Nodes that failed a job's preparation task take none of its tasks: their free slots are set
/// aside while its tasks are placed.
pub fn hide(nodes: &mut [FreeNode], excluded: &[i64]) -> Vec<(usize, i32, i32)> {
    nodes
        .iter_mut()
        .enumerate()
        .filter(|(_, n)| excluded.contains(&n.node_pk))
        .map(|(i, n)| (i, std::mem::take(&mut n.free), std::mem::take(&mut n.ahead)))
        .collect()
}

pub fn restore(nodes: &mut [FreeNode], hidden: Vec<(usize, i32, i32)>) {
    for (i, free, ahead) in hidden {
        nodes[i].free = free;
        nodes[i].ahead = ahead;
    }
}

/// Whether `node` can take a task that `needs` this: enough free slots, and dedicated if the
/// task must have a dedicated node.
fn fits(node: &FreeNode, needs: Needs) -> bool {
    node.free >= needs.slots && (node.dedicated || !needs.dedicated_only)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_is_auto_or_a_number_up_to_16() {
        assert_eq!("auto".parse(), Ok(AheadSetting::Auto));
        assert_eq!("AUTO".parse(), Ok(AheadSetting::Auto));
        assert_eq!("4".parse(), Ok(AheadSetting::Fixed(4)));
        assert!("17".parse::<AheadSetting>().is_err());
        assert!("-1".parse::<AheadSetting>().is_err());
        assert!("some".parse::<AheadSetting>().is_err());
    }

    fn nodes(free: &[i32]) -> Vec<FreeNode> {
        free.iter()
            .enumerate()
            .map(|(i, &free)| FreeNode {
                node_pk: i as i64,
                id: format!("n{i}"),
                free,
                ahead: 0,
                dedicated: true,
            })
            .collect()
    }

    fn any(slots: i32) -> Needs {
        Needs {
            slots,
            dedicated_only: false,
            own_container: false,
        }
    }

    #[test]
    fn spread_fills_the_emptiest_node_first() {
        let mut n = nodes(&[4, 4]);
        let placed: Vec<_> = (0..4)
            .map(|_| place(&mut n, any(1), NodeFillType::Spread).unwrap())
            .collect();
        assert_eq!(placed, vec![0, 1, 0, 1]);
    }

    #[test]
    fn pack_fills_one_node_before_the_next() {
        let mut n = nodes(&[4, 4]);
        let placed: Vec<_> = (0..6)
            .map(|_| place(&mut n, any(1), NodeFillType::Pack).unwrap())
            .collect();
        assert_eq!(placed, vec![0, 0, 0, 0, 1, 1]);
    }

    #[test]
    fn never_more_than_the_free_slots() {
        let mut n = nodes(&[3, 1]);
        assert_eq!(place(&mut n, any(2), NodeFillType::Pack), Some(0));
        assert_eq!(place(&mut n, any(2), NodeFillType::Pack), None);
        assert_eq!(place(&mut n, any(1), NodeFillType::Pack), Some(0));
        assert_eq!(place(&mut n, any(1), NodeFillType::Pack), Some(1));
        assert_eq!(place(&mut n, any(1), NodeFillType::Spread), None);
        assert!(n.iter().all(|n| n.free == 0));
    }

    #[test]
    fn affinity_is_a_hint_taken_while_its_node_has_room() {
        let mut n = nodes(&[1, 1, 1]);
        let spread = NodeFillType::Spread;
        assert_eq!(place_near(&mut n, any(1), spread, Some("TVM:n2")), Some(2));
        // Full, or named wrong: placed as without it.
        assert_eq!(place_near(&mut n, any(1), spread, Some("TVM:n2")), Some(0));
        assert_eq!(place_near(&mut n, any(1), spread, Some("n1x")), Some(1));
        assert_eq!(place_near(&mut n, any(1), spread, Some("TVM:n0")), None);
    }

    #[test]
    fn a_dedicated_only_task_passes_low_priority_nodes_by() {
        let mut n = nodes(&[4, 2]);
        n[0].dedicated = false;
        let dedicated = Needs {
            dedicated_only: true,
            ..any(1)
        };
        assert_eq!(place(&mut n, dedicated, NodeFillType::Spread), Some(1));
        assert_eq!(place(&mut n, dedicated, NodeFillType::Spread), Some(1));
        assert_eq!(place(&mut n, dedicated, NodeFillType::Spread), None);
        assert_eq!(place(&mut n, any(1), NodeFillType::Spread), Some(0));
    }

    #[test]
    fn tasks_wait_on_nodes_only_beyond_their_free_slots_and_within_their_room() {
        // Two nodes of 2 slots, 1 task ahead a slot: one with a slot free, one with a task
        // waiting already.
        let mut n = vec![
            FreeNode::new(0, "n0".into(), (1, 2, 1)),
            FreeNode::new(1, "n1".into(), (-1, 2, 1)),
        ];
        assert_eq!((n[0].free, n[0].ahead, n[1].free, n[1].ahead), (1, 2, 0, 1));
        assert_eq!(FreeNode::new(2, "n2".into(), (1, 2, 0)).ahead, 0);
        assert_eq!(place(&mut n, any(1), NodeFillType::Spread), Some(0));
        assert_eq!(place(&mut n, any(1), NodeFillType::Spread), None);
        assert_eq!(place_ahead(&mut n, any(2)), None, "a wide task never waits");
        let ahead: Vec<_> = (0..4).map(|_| place_ahead(&mut n, any(1))).collect();
        assert_eq!(ahead, vec![Some(0), Some(0), Some(1), None]);
        // A low-priority node holds no task that must have a dedicated node.
        let mut low = vec![FreeNode {
            dedicated: false,
            ..FreeNode::new(3, "n3".into(), (0, 1, 1))
        }];
        let dedicated_only = Needs {
            dedicated_only: true,
            ..any(1)
        };
        assert_eq!(place_ahead(&mut low, dedicated_only), None);
        let own_container = Needs {
            own_container: true,
            ..any(1)
        };
        assert_eq!(place_ahead(&mut low, own_container), None);
        assert_eq!(place_ahead(&mut low, any(1)), Some(3));
    }
}
