//! The simulated `docker-machine` store: the names of machines that exist on the provider, in
//! the order `docker-machine ls` lists them (lexicographic: upstream's listing is a directory
//! scan). Kept as a sorted vector because every Acquire pass reads the whole listing while
//! machines come and go rarely. It knows nothing else about machines.

/// Machine names in listing order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Store {
    names: Vec<String>,
}

impl Store {
    /// True if the machine exists.
    pub fn contains(&self, name: &str) -> bool {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_ok()
    }

    /// Adds a machine (no-op if it exists).
    pub fn insert(&mut self, name: String) {
        if let Err(at) = self.names.binary_search(&name) {
            self.names.insert(at, name);
        }
    }

    /// Removes a machine (no-op if it does not exist).
    pub fn remove(&mut self, name: &str) {
        if let Ok(at) = self.names.binary_search_by(|n| n.as_str().cmp(name)) {
            self.names.remove(at);
        }
    }

    /// The listing: every name, in order.
    pub fn listing(&self) -> &[String] {
        &self.names
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
