//! Where a task goes: a node with enough free slots, chosen by the pool's nodeFillType.

use super::pool::NodeFillType;

/// A node's free slots, as dispatch sees them during one pass.
#[derive(Clone, Debug)]
pub struct FreeNode {
    pub node_pk: i64,
    pub free: i32,
}

/// Picks a node for a task that needs `slots` and takes them from it. `spread`: the node with
/// the most free slots (ties: the first); `pack`: the fullest node that still fits.
pub fn place(nodes: &mut [FreeNode], slots: i32, fill: NodeFillType) -> Option<i64> {
    let fits = nodes.iter_mut().filter(|n| n.free >= slots);
    let chosen = match fill {
        NodeFillType::Spread => fits.reduce(|best, n| if n.free > best.free { n } else { best }),
        NodeFillType::Pack => fits.reduce(|best, n| if n.free < best.free { n } else { best }),
    }?;
    chosen.free -= slots;
    Some(chosen.node_pk)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(free: &[i32]) -> Vec<FreeNode> {
        free.iter()
            .enumerate()
            .map(|(i, &free)| FreeNode {
                node_pk: i as i64,
                free,
            })
            .collect()
    }

    #[test]
    fn spread_fills_the_emptiest_node_first() {
        let mut n = nodes(&[4, 4]);
        let placed: Vec<_> = (0..4)
            .map(|_| place(&mut n, 1, NodeFillType::Spread).unwrap())
            .collect();
        assert_eq!(placed, vec![0, 1, 0, 1]);
    }

    #[test]
    fn pack_fills_one_node_before_the_next() {
        let mut n = nodes(&[4, 4]);
        let placed: Vec<_> = (0..6)
            .map(|_| place(&mut n, 1, NodeFillType::Pack).unwrap())
            .collect();
        assert_eq!(placed, vec![0, 0, 0, 0, 1, 1]);
    }

    #[test]
    fn never_more_than_the_free_slots() {
        let mut n = nodes(&[3, 1]);
        assert_eq!(place(&mut n, 2, NodeFillType::Pack), Some(0));
        assert_eq!(place(&mut n, 2, NodeFillType::Pack), None);
        assert_eq!(place(&mut n, 1, NodeFillType::Pack), Some(0));
        assert_eq!(place(&mut n, 1, NodeFillType::Pack), Some(1));
        assert_eq!(place(&mut n, 1, NodeFillType::Spread), None);
        assert!(n.iter().all(|n| n.free == 0));
    }
}
