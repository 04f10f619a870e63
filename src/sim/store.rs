//! The simulated `docker-machine` store: the names of machines that exist on the provider, in
//! the order `docker-machine ls` lists them (lexicographic: upstream's listing is a directory
//! scan). A hash set (machines come and go several times a second in a large day, and the
//! simulator mostly asks whether one exists); the sorted listing, which only `Use` sessions
//! ask for, is rebuilt when it is asked for after a change. It knows nothing else about
//! machines.

use rustc_hash::FxHashSet;

/// Machine names in listing order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Store {
    names: FxHashSet<String>,
    /// `names` as a slice, when no change came since it was built.
    listing: Option<Vec<String>>,
}

impl Store {
    /// True if the machine exists.
    pub fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    /// Adds a machine (no-op if it exists).
    pub fn insert(&mut self, name: String) {
        if self.names.insert(name) {
            self.listing = None;
        }
    }

    /// Removes a machine (no-op if it does not exist).
    pub fn remove(&mut self, name: &str) {
        if self.names.remove(name) {
            self.listing = None;
        }
    }

    /// The listing: every name, in order.
    pub fn listing(&mut self) -> &[String] {
        self.listing.get_or_insert_with(|| {
            let mut listing: Vec<String> = self.names.iter().cloned().collect();
            listing.sort_unstable();
            listing
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_in_lexicographic_order() {
        let mut s = Store::default();
        for n in ["m-3", "m-1", "m-2", "m-1"] {
            s.insert(n.to_string());
        }
        assert_eq!(s.listing(), ["m-1", "m-2", "m-3"]);
        s.remove("m-2");
        s.remove("m-9");
        assert!(s.contains("m-3") && !s.contains("m-2"));
        assert_eq!(s.listing(), ["m-1", "m-3"]);
    }
}
