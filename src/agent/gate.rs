//! The node's task slots, as its agent fills them: a task starts once its slots are free, in
//! the order tasks came. The server may place single-slot tasks beyond a node's slots
//! (`--tasks-ahead-per-slot`); they wait here, and one starts the moment a slot frees, with no
//! round trip to the server between one task's end and the next one's start.

use std::collections::VecDeque;

use crate::domain::agent::Slots;

/// The slots in use and the commands waiting for theirs (`T`, each with its id and slots).
pub struct Gate<T> {
    used: u32,
    /// The node's slots, as its latest task said.
    of: u32,
    waiting: VecDeque<(u64, u32, T)>,
}

impl<T> Default for Gate<T> {
    fn default() -> Self {
        Self {
            used: 0,
            of: 0,
            waiting: VecDeque::new(),
        }
    }
}

impl<T> Gate<T> {
    /// The command `id`, if it may start now (its slots taken); None if it waits for them. One
    /// without slots (not a task's) starts at once and takes none.
    pub fn admit(&mut self, id: u64, slots: Option<Slots>, command: T) -> Option<T> {
        let Some(slots) = slots else {
            return Some(command);
        };
        self.of = slots.of;
        if self.waiting.is_empty() && self.fits(slots.needs) {
            self.used += slots.needs;
            return Some(command);
        }
        self.waiting.push_back((id, slots.needs, command));
        None
    }

    /// A command that took `slots` ended: the waiting commands that start now, first come
    /// first, their slots taken.
    pub fn release(&mut self, slots: Option<Slots>) -> Vec<T> {
        if let Some(slots) = slots {
            self.used = self.used.saturating_sub(slots.needs);
        }
        let mut start = Vec::new();
        while let Some((_, needs, _)) = self.waiting.front() {
            if !self.fits(*needs) {
                break;
            }
            self.used += *needs;
            start.extend(self.waiting.pop_front().map(|(_, _, c)| c));
        }
        start
    }

    /// Takes the command `id` out, if it waits still.
    pub fn cancel(&mut self, id: u64) -> Option<T> {
        let at = self.waiting.iter().position(|(i, _, _)| *i == id)?;
        self.waiting.remove(at).map(|(_, _, c)| c)
    }

    /// Takes every waiting command out.
    pub fn clear(&mut self) -> usize {
        let n = self.waiting.len();
        self.waiting.clear();
        n
    }

    /// Whether `needs` slots are free; a task wider than the node runs alone.
    fn fits(&self, needs: u32) -> bool {
        self.used == 0 || self.used + needs <= self.of
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(needs: u32) -> Option<Slots> {
        Some(Slots { needs, of: 2 })
    }

    #[test]
    fn tasks_beyond_the_slots_wait_and_start_in_order_as_slots_free() {
        let mut gate = Gate::default();
        assert_eq!(gate.admit(1, slots(1), "a"), Some("a"));
        assert_eq!(gate.admit(2, slots(1), "b"), Some("b"));
        assert_eq!(gate.admit(3, slots(1), "c"), None);
        assert_eq!(gate.admit(4, slots(1), "d"), None);
        // Not a task's: at once, whatever waits.
        assert_eq!(gate.admit(5, None, "start task"), Some("start task"));
        assert_eq!(gate.release(slots(1)), vec!["c"]);
        assert_eq!(gate.release(None), Vec::<&str>::new());
        assert_eq!(gate.release(slots(1)), vec!["d"]);
        assert_eq!(gate.release(slots(1)), Vec::<&str>::new());
        assert_eq!(gate.release(slots(1)), Vec::<&str>::new());
        assert_eq!(gate.admit(6, slots(1), "e"), Some("e"));
    }

    #[test]
    fn a_wide_task_waits_for_its_slots_and_those_after_it_wait_behind_it() {
        let mut gate = Gate::default();
        assert_eq!(gate.admit(1, slots(1), "a"), Some("a"));
        assert_eq!(gate.admit(2, slots(2), "wide"), None);
        assert_eq!(gate.admit(3, slots(1), "b"), None);
        assert_eq!(gate.release(slots(1)), vec!["wide"]);
        assert_eq!(gate.release(slots(2)), vec!["b"]);
        // Wider than the node: alone.
        assert_eq!(gate.release(slots(1)), Vec::<&str>::new());
        assert_eq!(
            gate.admit(4, Some(Slots { needs: 3, of: 2 }), "x"),
            Some("x")
        );
        assert_eq!(gate.admit(5, slots(1), "c"), None);
    }

    #[test]
    fn a_waiting_task_can_be_dropped_and_all_of_them_cleared() {
        let mut gate = Gate::default();
        gate.admit(1, slots(2), "a");
        gate.admit(2, slots(1), "b");
        gate.admit(3, slots(1), "c");
        gate.admit(4, slots(1), "d");
        assert_eq!(gate.cancel(3), Some("c"));
        assert_eq!(gate.cancel(3), None);
        assert_eq!(gate.cancel(1), None, "a runs: it is for a kill, not a drop");
        assert_eq!(gate.clear(), 2);
        assert_eq!(gate.release(slots(2)), Vec::<&str>::new());
    }
}
