//! Virtual time and the deterministic discrete-event queue the simulator runs on.
//!
//! Time here is a count of milliseconds since the start of the simulation ([`SimTime`]); it never
//! comes from a clock. Events due at the same instant come out in the order they were scheduled
//! (first in, first out), so a run depends only on its inputs. This module knows nothing about
//! machines, jobs or the engine: the simulator in [`crate::sim`] decides what the events mean.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Milliseconds since the start of a simulation.
pub type SimTime = u64;

/// Milliseconds in one second, for conversions at the edges.
pub const MS_PER_S: u64 = 1_000;

/// Converts a non-negative number of seconds into [`SimTime`] milliseconds, rounding to the
/// nearest millisecond. Negative, NaN and infinite inputs give `None`.
pub fn secs_to_ms(secs: f64) -> Option<SimTime> {
    if !secs.is_finite() || secs < 0.0 || secs > (u64::MAX / 2) as f64 / 1000.0 {
        return None;
    }
    Some((secs * 1000.0).round() as SimTime)
}

/// One scheduled event: its due time, its scheduling sequence number and where its payload
/// waits in [`EventQueue::slots`]. Payloads stay out of the heap, so reordering the heap moves
/// 24 bytes per entry, whatever the size of an event.
#[derive(Debug, Clone, Copy)]
struct Entry {
    at: SimTime,
    seq: u64,
    slot: usize,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    /// Reversed so that `BinaryHeap` (a max-heap) pops the earliest entry, and among equal times
    /// the one scheduled first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at
            .cmp(&self.at)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// A priority queue of events in virtual time.
///
/// [`EventQueue::pop`] returns events in order of due time; ties are broken by scheduling order,
/// and the queue's clock ([`EventQueue::now`]) advances to the due time of the popped event.
/// Scheduling an event in the past schedules it at the current time instead, so time never runs
/// backwards.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry>,
    /// The pending events' payloads; `None` marks a free slot (listed in `free`).
    slots: Vec<Option<E>>,
    free: Vec<usize>,
    next_seq: u64,
    now: SimTime,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    /// An empty queue at time zero.
    pub fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next_seq: 0,
            now: 0,
        }
    }

    /// The current virtual time: the due time of the last popped event.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedules `event` at `at` (or now, if `at` is in the past).
    pub fn schedule(&mut self, at: SimTime, event: E) {
        let at = at.max(self.now);
        let seq = self.next_seq;
        self.next_seq += 1;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Some(event);
                slot
            }
            None => {
                self.slots.push(Some(event));
                self.slots.len() - 1
            }
        };
        self.heap.push(Entry { at, seq, slot });
    }

    /// Schedules `event` `delay` milliseconds from now.
    pub fn schedule_in(&mut self, delay: SimTime, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// The due time of the next event, if any.
    pub fn peek_time(&self) -> Option<SimTime> {
        self.heap.peek().map(|e| e.at)
    }

    /// Advances the clock to `at` for an event kept outside the queue (the simulator's
    /// arrivals, read in order from the workload); never moves it back.
    pub fn advance_to(&mut self, at: SimTime) {
        self.now = self.now.max(at);
    }

    /// Removes the next event and advances the clock to its due time.
    pub fn pop(&mut self) -> Option<(SimTime, E)> {
        let entry = self.heap.pop()?;
        self.now = entry.at;
        let event = self.slots.get_mut(entry.slot).and_then(Option::take)?;
        self.free.push(entry.slot);
        Some((entry.at, event))
    }

    /// Number of pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no event is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_then_fifo() {
        let mut q = EventQueue::new();
        q.schedule(30, "c");
        q.schedule(10, "a1");
        q.schedule(20, "b");
        q.schedule(10, "a2");
        q.schedule(10, "a3");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            vec![(10, "a1"), (10, "a2"), (10, "a3"), (20, "b"), (30, "c")]
        );
        assert_eq!(q.now(), 30);
    }

    #[test]
    fn past_events_are_clamped_to_now() {
        let mut q = EventQueue::new();
        q.schedule(100, 1);
        assert_eq!(q.pop(), Some((100, 1)));
        q.schedule(5, 2);
        q.schedule_in(0, 3);
        assert_eq!(q.pop(), Some((100, 2)));
        assert_eq!(q.pop(), Some((100, 3)));
        assert!(q.is_empty());
    }

    #[test]
    fn seconds_convert_to_milliseconds() {
        assert_eq!(secs_to_ms(1.5), Some(1500));
        assert_eq!(secs_to_ms(0.0004), Some(0));
        assert_eq!(secs_to_ms(-1.0), None);
        assert_eq!(secs_to_ms(f64::NAN), None);
        assert_eq!(secs_to_ms(f64::INFINITY), None);
    }
}
