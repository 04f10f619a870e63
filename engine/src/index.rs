//! The Acquire pass's indexes (issue 24 item 2): what a pass over the provider's listing
//! would accumulate, kept up to date on every machine transition so that a pass in steady
//! state costs the same at 100 machines as at 10,000.
//!
//! The driver keeps the engine's copy of the listing current with
//! [`Engine::listing_insert`] / [`Engine::listing_remove`] and runs passes with
//! [`Engine::begin_acquire_listed`]. The engine then knows, without walking the listing:
//!
//! * the counters of the machines a pass would visit (the listed machines that match the
//!   runner's filter, then the unlisted Creating ones), per state;
//! * the listed machines in listing (name) order with their states, in sorted blocks that
//!   carry per-block counters, so "the counters before this machine" and "the machine at
//!   this position" cost a block walk, not a machine walk;
//! * the listed Idle machines by name (the newest-first search) and by last use (the
//!   machines idle longer than `IdleTime`).
//!
//! Every ledger write marks the record dirty; [`Index::sync`] re-reads the dirty records and
//! moves their contributions. A pass whose decisions these structures cannot settle exactly
//! (several runners, `IdleScaleFactor`, an Idle machine at `MaxBuilds`, a listed name the
//! ledger does not know) is run as the full pass over the same listing; see
//! [`Engine::begin_acquire_listed`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashSet;

use super::machine::{Counts, Id, Ledger, MachineState};
use super::naming::FilterMatcher;
use super::Time;

/// Entries per block before it splits (a block walk and an in-block scan both stay short).
const BLOCK: usize = 128;

/// Where a machine stands towards the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Listed and matching the filter: visited in listing order.
    Listed,
    /// Creating, matching the filter, not listed: visited after the listing.
    Unlisted,
}

/// Where a record stands towards the pass: members are the records whose name matches the
/// filter and that are listed, or Creating and not (yet) listed.
fn kind_of(matches: bool, listed: bool, state: MachineState) -> Option<Kind> {
    if !matches {
        None
    } else if listed {
        Some(Kind::Listed)
    } else if state == MachineState::Creating {
        Some(Kind::Unlisted)
    } else {
        None
    }
}

/// A member's name with its order key, so that the ordered structures compare 16-byte
/// integers held inline instead of reading names (which share a long prefix) from the heap.
///
/// Every member matches the runner's filter, so all member names share its literal prefix
/// ([`FilterMatcher::literal_prefix_len`], `skip`). The head is the 16 bytes after it,
/// big-endian, zero-padded. Among names sharing those `skip` bytes, a smaller head means a
/// smaller name and equal heads say nothing (padding with the smallest byte keeps the map
/// monotone), so comparing heads first and names only on a tie is exactly the names' order.
/// Names are shared (`Arc`): the snapshot, its entry and the Idle index hold one allocation.
/// The derived order compares the fields in declaration order: the head, then the name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    head: u128,
    name: Arc<str>,
}

impl Key {
    fn head(name: &str, skip: usize) -> u128 {
        let mut b = [0u8; 16];
        if let Some(rest) = name.as_bytes().get(skip..) {
            let n = rest.len().min(16);
            b[..n].copy_from_slice(&rest[..n]);
        }
        u128::from_be_bytes(b)
    }

    fn new(name: Arc<str>, skip: usize) -> Key {
        Key {
            head: Key::head(&name, skip),
            name,
        }
    }
}

/// What the index last recorded for one machine.
#[derive(Debug, Clone)]
struct Snap {
    key: Key,
    /// Whether the name matches the filter (names never change, so this is read once).
    matches: bool,
    /// Whether the name is in the mirror (kept by `mirror_insert` / `mirror_remove`).
    listed: bool,
    /// `None`: tracked, but not visited by a pass.
    kind: Option<Kind>,
    state: MachineState,
    retry_count: u32,
    used: Time,
    used_count: i64,
    /// The index clock when the machine became a member of this kind.
    since: u64,
}

/// The snapshots by ledger slot: a handle's slot finds its snapshot without hashing, and
/// the slab stays as dense as the ledger's. A slot holds at most one snapshot, of the record
/// with that handle; one left by an earlier record of a reused slot is *stale* until
/// [`Index::refresh`] retires it.
#[derive(Debug, Default)]
struct Snaps {
    slots: Vec<Option<(Id, Snap)>>,
}

impl Snaps {
    fn get(&self, id: Id) -> Option<&Snap> {
        match self.slots.get(id.slot()) {
            Some(Some((i, s))) if *i == id => Some(s),
            _ => None,
        }
    }

    fn get_mut(&mut self, id: Id) -> Option<&mut Snap> {
        match self.slots.get_mut(id.slot()) {
            Some(Some((i, s))) if *i == id => Some(s),
            _ => None,
        }
    }

    fn remove(&mut self, id: Id) -> Option<Snap> {
        let slot = self.slots.get_mut(id.slot())?;
        if slot.as_ref().is_some_and(|(i, _)| *i == id) {
            slot.take().map(|(_, s)| s)
        } else {
            None
        }
    }

    /// The handle of the snapshot in `id`'s slot when it belongs to another record.
    fn stale(&self, id: Id) -> Option<Id> {
        match self.slots.get(id.slot()) {
            Some(Some((i, _))) if *i != id => Some(*i),
            _ => None,
        }
    }

    /// Stores `snap` for `id`; the slot holds no other record's snapshot (see `stale`).
    fn insert(&mut self, id: Id, snap: Snap) {
        let at = id.slot();
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, || None);
        }
        if let Some(slot) = self.slots.get_mut(at) {
            *slot = Some((id, snap));
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    key: Key,
    state: MachineState,
    retry_count: u32,
}

fn count(c: &mut Counts, state: MachineState, retry_count: u32, delta: i64) {
    let mut one = Counts::default();
    one.add(state, retry_count);
    c.acquired += delta * one.acquired;
    c.creating += delta * one.creating;
    c.idle += delta * one.idle;
    c.used += delta * one.used;
    c.removing += delta * one.removing;
    c.stuck_on_removing += delta * one.stuck_on_removing;
}

fn is_available(state: MachineState) -> bool {
    matches!(
        state,
        MachineState::Idle | MachineState::Acquired | MachineState::Creating
    )
}

/// Listed members in name order, in sorted blocks with per-block counters.
#[derive(Debug, Default)]
struct Ranked {
    blocks: Vec<Vec<Entry>>,
    counts: Vec<Counts>,
    len: usize,
}

impl Ranked {
    /// The block that holds (or would hold) `key`.
    fn block_of(&self, key: &Key) -> usize {
        let after = self
            .blocks
            .partition_point(|b| b.last().is_some_and(|e| e.key < *key));
        after.min(self.blocks.len().saturating_sub(1))
    }

    fn insert(&mut self, e: Entry) {
        if self.blocks.is_empty() {
            self.blocks.push(Vec::new());
            self.counts.push(Counts::default());
        }
        let b = self.block_of(&e.key);
        let (Some(block), Some(c)) = (self.blocks.get_mut(b), self.counts.get_mut(b)) else {
            return;
        };
        let at = block.partition_point(|x| x.key < e.key);
        count(c, e.state, e.retry_count, 1);
        block.insert(at, e);
        self.len += 1;
        if block.len() > 2 * BLOCK {
            let tail = block.split_off(BLOCK);
            let mut tc = Counts::default();
            for x in &tail {
                count(&mut tc, x.state, x.retry_count, 1);
                count(c, x.state, x.retry_count, -1);
            }
            self.blocks.insert(b + 1, tail);
            self.counts.insert(b + 1, tc);
        }
    }

    fn remove(&mut self, key: &Key) {
        let b = self.block_of(key);
        let (Some(block), Some(c)) = (self.blocks.get_mut(b), self.counts.get_mut(b)) else {
            return;
        };
        let Ok(at) = block.binary_search_by(|x| x.key.cmp(key)) else {
            return;
        };
        let e = block.remove(at);
        count(c, e.state, e.retry_count, -1);
        self.len -= 1;
        if block.is_empty() {
            self.blocks.remove(b);
            self.counts.remove(b);
        }
    }

    /// Changes the state of the entry `key` in place (its place in the order is its name's).
    fn update(&mut self, key: &Key, state: MachineState, retry_count: u32) {
        let b = self.block_of(key);
        let (Some(block), Some(c)) = (self.blocks.get_mut(b), self.counts.get_mut(b)) else {
            return;
        };
        let Ok(at) = block.binary_search_by(|x| x.key.cmp(key)) else {
            return;
        };
        let Some(e) = block.get_mut(at) else {
            return;
        };
        count(c, e.state, e.retry_count, -1);
        e.state = state;
        e.retry_count = retry_count;
        count(c, state, retry_count, 1);
    }

    /// The counters of the entries before `key`.
    fn counts_before(&self, key: &Key) -> Counts {
        let b = self.block_of(key);
        let mut c = Counts::default();
        for bc in self.counts.iter().take(b) {
            for (s, n) in [
                (MachineState::Acquired, bc.acquired),
                (MachineState::Creating, bc.creating),
                (MachineState::Idle, bc.idle),
                (MachineState::Used, bc.used),
            ] {
                count(&mut c, s, 0, n);
            }
            c.removing += bc.removing;
            c.stuck_on_removing += bc.stuck_on_removing;
        }
        if let Some(block) = self.blocks.get(b) {
            for e in block.iter().take_while(|e| e.key < *key) {
                count(&mut c, e.state, e.retry_count, 1);
            }
        }
        c
    }

    /// The key at 0-based position `pos`.
    fn at(&self, mut pos: usize) -> Option<&Key> {
        for block in &self.blocks {
            if pos < block.len() {
                return block.get(pos).map(|e| &e.key);
            }
            pos -= block.len();
        }
        None
    }

    /// The key of the `k`-th (1-based) available entry (Idle, Acquired or Creating).
    fn kth_available(&self, mut k: i64) -> Option<&Key> {
        for (block, c) in self.blocks.iter().zip(&self.counts) {
            let here = c.available();
            if k > here {
                k -= here;
                continue;
            }
            for e in block {
                if is_available(e.state) {
                    k -= 1;
                    if k == 0 {
                        return Some(&e.key);
                    }
                }
            }
            return None;
        }
        None
    }
}

/// The pass indexes for the engine's one runner (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// The provider's listing as the driver reported it.
    /// Unordered: the indexed passes only ask whether a name is listed.
    pub(crate) mirror: FxHashSet<Box<str>>,
    /// The mirror in listing (name) order, kept from the first pass that walks the listing
    /// on (several runners, `IdleScaleFactor`, …: see [`Engine::begin_acquire_listed`]), so
    /// that such passes do not sort it each time and the indexed ones never pay for it.
    ordered: Option<BTreeSet<Box<str>>>,
    /// Mirror names that match the filter.
    mirror_matching: usize,
    /// The filter the membership was computed with (`None`: not maintained).
    matcher: Option<FilterMatcher>,
    /// The length of the filter's literal prefix, which every member's name starts with
    /// (see [`Key`]).
    skip: usize,
    snaps: Snaps,
    /// Counters over the members (what a pass would accumulate before deciding anything).
    pub(crate) counts: Counts,
    /// Counters over every tracked machine.
    pub(crate) all: Counts,
    ranked: Ranked,
    /// Listed Idle members by name.
    idle_by_name: BTreeMap<Key, Id>,
    /// Listed Idle members by last use.
    idle_by_used: BTreeSet<(Time, Id)>,
    /// Used counts of the listed Idle members (a multiset).
    idle_used_counts: BTreeMap<i64, usize>,
    /// Advances on every membership change and every pass.
    pub(crate) clock: u64,
    /// The last pass over the indexes: its time and its clock.
    last_pass: Option<(Time, u64)>,
}

impl Index {
    /// Starts maintaining the indexes for `matcher` (rebuilt from every record).
    pub(crate) fn enable(&mut self, matcher: Option<FilterMatcher>, ledger: &mut Ledger) {
        let mirror = std::mem::take(&mut self.mirror);
        let ordered = self.ordered.take();
        let last_pass = self.last_pass;
        *self = Index::default();
        self.last_pass = last_pass;
        self.ordered = ordered;
        self.mirror_matching = match &matcher {
            Some(m) => mirror.iter().filter(|n| m.matches(n)).count(),
            None => 0,
        };
        self.mirror = mirror;
        self.skip = matcher
            .as_ref()
            .map_or(0, FilterMatcher::literal_prefix_len);
        self.matcher = matcher;
        ledger.dirty.clear();
        ledger.track_dirty = self.matcher.is_some();
        if ledger.track_dirty {
            let ids: Vec<Id> = ledger.iter().map(|(id, _)| id).collect();
            ledger.dirty.extend(ids);
            self.sync(ledger);
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.matcher.is_some()
    }

    /// Listed names that match the filter but no record knows (a pass would adopt them).
    pub(crate) fn untracked_listed(&self) -> usize {
        self.mirror_matching.saturating_sub(self.ranked.len)
    }

    /// The listing in name order, for a pass that walks it (kept from then on).
    pub(crate) fn listing_in_order(&mut self) -> &BTreeSet<Box<str>> {
        let mirror = &self.mirror;
        self.ordered
            .get_or_insert_with(|| mirror.iter().cloned().collect())
    }

    /// Listed members, in listing order.
    pub(crate) fn listed_len(&self) -> usize {
        self.ranked.len
    }

    pub(crate) fn mirror_insert(&mut self, name: &str, ledger: &mut Ledger) {
        if self.mirror.insert(name.into()) {
            if let Some(o) = &mut self.ordered {
                o.insert(name.into());
            }
            if self.matcher.as_ref().is_some_and(|m| m.matches(name)) {
                self.mirror_matching += 1;
            }
            if let Some(id) = ledger.id_of(name) {
                if let Some(snap) = self.snaps.get_mut(id) {
                    snap.listed = true;
                }
                ledger.mark(id);
            }
        }
    }

    pub(crate) fn mirror_remove(&mut self, name: &str, ledger: &mut Ledger) {
        if self.mirror.remove(name) {
            if let Some(o) = &mut self.ordered {
                o.remove(name);
            }
            if self.matcher.as_ref().is_some_and(|m| m.matches(name)) {
                self.mirror_matching -= 1;
            }
            if let Some(id) = ledger.id_of(name) {
                if let Some(snap) = self.snaps.get_mut(id) {
                    snap.listed = false;
                }
                ledger.mark(id);
            }
        }
    }

    /// Re-reads every record written since the last sync and moves its contributions.
    pub(crate) fn sync(&mut self, ledger: &mut Ledger) {
        if !self.enabled() {
            ledger.dirty.clear();
            return;
        }
        let dirty = std::mem::take(&mut ledger.dirty);
        for &id in &dirty {
            self.refresh(id, ledger);
        }
        let mut dirty = dirty;
        dirty.clear();
        ledger.dirty = dirty;
    }

    fn refresh(&mut self, id: Id, ledger: &mut Ledger) {
        if let Some(earlier) = self.snaps.stale(id) {
            // The slot was reused before the earlier record's deletion was read: retire it
            // first (its record is gone, so this only takes its contributions out).
            self.refresh(earlier, ledger);
        }
        if self.refresh_in_place(id, ledger) {
            return;
        }
        let old = self.snaps.remove(id);
        let (matches, listed) = match (&old, ledger.get(id)) {
            // A handle names one record (a reused slot gets a new generation) and a record's
            // name never changes: what the old snapshot knew still holds.
            (Some(o), Some(_)) => (o.matches, o.listed),
            (_, Some(m)) => (
                self.matcher.as_ref().is_some_and(|f| f.matches(&m.name)),
                self.mirror.contains(&*m.name),
            ),
            (_, None) => (false, false),
        };
        let kind = ledger
            .get(id)
            .and_then(|m| kind_of(matches, listed, m.state));
        if let Some(o) = &old {
            self.unindex(id, o);
        }
        if old
            .as_ref()
            .is_some_and(|o| o.kind.is_some() && o.kind != kind)
        {
            // Leaving the members, or changing place in the pass order: the record keeps
            // what the passes since it joined saw.
            if let (Some(o), Some(m)) = (&old, ledger.get_mut_quiet(id)) {
                if let Some((t, clock)) = self.last_pass {
                    if o.since < clock && m.last_seen < t {
                        m.last_seen = t;
                    }
                }
            }
        }
        let Some(m) = ledger.get(id) else {
            return;
        };
        let since = match &old {
            Some(o) if o.kind == kind => o.since,
            _ => {
                self.clock += 1;
                self.clock
            }
        };
        let key = match old {
            Some(o) => o.key,
            None => Key::new(Arc::from(&*m.name), self.skip),
        };
        let snap = Snap {
            key,
            matches,
            listed,
            kind,
            state: m.state,
            retry_count: m.retry_count,
            used: m.used,
            used_count: m.used_count,
            since,
        };
        self.reindex(id, &snap);
        self.snaps.insert(id, snap);
    }

    /// The common case of [`Self::refresh`]: a record that stays where it was towards the pass
    /// (same kind) has its counters, its entry and its Idle indexes moved in place, with no
    /// lookup by name beyond its entry's and no allocation. Returns false when the general
    /// path must run (a new or removed record, or a change of kind).
    fn refresh_in_place(&mut self, id: Id, ledger: &Ledger) -> bool {
        let (Some(snap), Some(m)) = (self.snaps.get_mut(id), ledger.get(id)) else {
            return false;
        };
        let kind = kind_of(snap.matches, snap.listed, m.state);
        if kind != snap.kind {
            return false;
        }
        let old = (snap.state, snap.retry_count, snap.used, snap.used_count);
        let new = (m.state, m.retry_count, m.used, m.used_count);
        if old == new {
            return true;
        }
        (snap.state, snap.retry_count, snap.used, snap.used_count) = new;
        let (old_state, old_retry, old_used, old_used_count) = old;
        let (state, retry_count, used, used_count) = new;
        count(&mut self.all, old_state, old_retry, -1);
        count(&mut self.all, state, retry_count, 1);
        if kind.is_none() {
            return true;
        }
        count(&mut self.counts, old_state, old_retry, -1);
        count(&mut self.counts, state, retry_count, 1);
        if kind != Some(Kind::Listed) {
            return true;
        }
        let key = &snap.key;
        self.ranked.update(key, state, retry_count);
        if old_state == MachineState::Idle {
            self.idle_by_used.remove(&(old_used, id));
            if let Some(n) = self.idle_used_counts.get_mut(&old_used_count) {
                *n -= 1;
                if *n == 0 {
                    self.idle_used_counts.remove(&old_used_count);
                }
            }
            if state != MachineState::Idle {
                self.idle_by_name.remove(key);
            }
        }
        if state == MachineState::Idle {
            self.idle_by_used.insert((used, id));
            *self.idle_used_counts.entry(used_count).or_insert(0) += 1;
            if old_state != MachineState::Idle {
                self.idle_by_name.insert(key.clone(), id);
            }
        }
        true
    }

    fn unindex(&mut self, id: Id, s: &Snap) {
        count(&mut self.all, s.state, s.retry_count, -1);
        if s.kind.is_none() {
            return;
        }
        count(&mut self.counts, s.state, s.retry_count, -1);
        if s.kind != Some(Kind::Listed) {
            return;
        }
        self.ranked.remove(&s.key);
        if s.state == MachineState::Idle {
            self.idle_by_name.remove(&s.key);
            self.idle_by_used.remove(&(s.used, id));
            if let Some(n) = self.idle_used_counts.get_mut(&s.used_count) {
                *n -= 1;
                if *n == 0 {
                    self.idle_used_counts.remove(&s.used_count);
                }
            }
        }
    }

    fn reindex(&mut self, id: Id, s: &Snap) {
        count(&mut self.all, s.state, s.retry_count, 1);
        if s.kind.is_none() {
            return;
        }
        count(&mut self.counts, s.state, s.retry_count, 1);
        if s.kind != Some(Kind::Listed) {
            return;
        }
        self.ranked.insert(Entry {
            key: s.key.clone(),
            state: s.state,
            retry_count: s.retry_count,
        });
        if s.state == MachineState::Idle {
            self.idle_by_name.insert(s.key.clone(), id);
            self.idle_by_used.insert((s.used, id));
            *self.idle_used_counts.entry(s.used_count).or_insert(0) += 1;
        }
    }

    /// The largest used count among the listed Idle members.
    pub(crate) fn max_idle_used_count(&self) -> Option<i64> {
        self.idle_used_counts.keys().next_back().copied()
    }

    /// Listed Idle members with their last use, oldest first.
    pub(crate) fn idle_by_used(&self) -> impl Iterator<Item = (Time, Id)> + '_ {
        self.idle_by_used.iter().copied()
    }

    /// The key of a tracked machine.
    pub(crate) fn key_of(&self, id: Id) -> Option<&Key> {
        self.snaps.get(id).map(|s| &s.key)
    }

    /// Listed Idle members from `from` on, in name order.
    pub(crate) fn idle_from<'a>(&'a self, from: &Key) -> impl Iterator<Item = (&'a Key, Id)> {
        self.idle_by_name.range(from..).map(|(k, id)| (k, *id))
    }

    /// The listed Idle member just before `below` in name order (the last one for `None`).
    pub(crate) fn idle_before(&self, below: Option<&Key>) -> Option<(&Key, Id)> {
        match below {
            Some(b) => self.idle_by_name.range(..b).next_back(),
            None => self.idle_by_name.iter().next_back(),
        }
        .map(|(k, id)| (k, *id))
    }

    /// Whether the member joined before clock value `clock`.
    pub(crate) fn member_before(&self, id: Id, clock: u64) -> bool {
        self.snaps
            .get(id)
            .is_some_and(|s| s.kind.is_some() && s.since < clock)
    }

    pub(crate) fn counts_before(&self, key: &Key) -> Counts {
        self.ranked.counts_before(key)
    }

    pub(crate) fn listed_at(&self, pos: usize) -> Option<&Key> {
        self.ranked.at(pos)
    }

    pub(crate) fn kth_available(&self, k: i64) -> Option<&Key> {
        self.ranked.kth_available(k)
    }

    /// Notes a pass over the members at `now`; returns its clock value.
    pub(crate) fn note_pass(&mut self, now: Time) -> u64 {
        self.clock += 1;
        self.last_pass = Some((now, self.clock));
        self.clock
    }

    /// The last time a pass visited this machine, if later than its own record says.
    pub(crate) fn seen_since(&self, id: Id) -> Option<Time> {
        let (t, clock) = self.last_pass?;
        self.snaps
            .get(id)
            .is_some_and(|s| s.kind.is_some() && s.since < clock)
            .then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::Machine;

    fn at(secs: i64) -> Time {
        chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default()
    }

    /// The snapshots are kept by ledger slot. When a slot is reused and the new record is
    /// read before the deletion of the one it replaces (the dirty list only guarantees that
    /// both are read), the earlier record's snapshot must still leave every index.
    #[test]
    fn a_reused_slot_retires_the_earlier_record_even_when_read_first() {
        let mut ledger = Ledger::default();
        let mut index = Index::default();
        index.enable(Some(FilterMatcher::new("runner-abc-auto-%s")), &mut ledger);
        let first = "runner-abc-auto-1";
        let a = ledger.insert(Machine::new(first, MachineState::Idle, at(100), 1));
        index.mirror_insert(first, &mut ledger);
        index.sync(&mut ledger);
        assert_eq!((index.listed_len(), index.counts.idle), (1, 1));

        ledger.delete(a);
        index.mirror_remove(first, &mut ledger);
        let second = "runner-abc-auto-2";
        let b = ledger.insert(Machine::new(second, MachineState::Idle, at(200), 2));
        assert_eq!(a.slot(), b.slot(), "the test needs the slot reused");
        index.mirror_insert(second, &mut ledger);
        // Only the new record is read.
        ledger.dirty = vec![b];
        index.sync(&mut ledger);

        assert_eq!(index.listed_len(), 1);
        assert_eq!((index.counts.idle, index.all.idle), (1, 1));
        let idle: Vec<&str> = index
            .idle_from(&Key::new(Arc::from(""), 0))
            .map(|(k, _)| &*k.name)
            .collect();
        assert_eq!(idle, [second]);
        assert_eq!(index.idle_by_used().count(), 1);
    }
}
