//! The checked values the schema walk hands to serde: a small tree that serde reads straight
//! into the model.
//!
//! It replaces a `toml::Table` built only to be deserialised again: schema tables keep their
//! canonical keys as `&'static str` in a short list (no key string, no hash map per table),
//! values move into the model without a copy, and sections drover keeps verbatim stay a
//! `toml::Value` whose own deserializer runs unchanged. The walk has checked every type, so a
//! serde error here means the schema and the model disagree.

use serde::de::value::{Error, MapDeserializer, SeqDeserializer};
use serde::de::{Deserializer, Error as _, IntoDeserializer, Visitor};

/// One checked value.
#[derive(Debug)]
pub(crate) enum Node {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    List(Vec<Node>),
    /// A schema table: canonical keys, each at most once.
    Table(Vec<(&'static str, Node)>),
    /// A table whose keys are kept as written (labels, feature flags, tmpfs, ...).
    Map(Vec<(String, Node)>),
    /// A section kept verbatim.
    Raw(toml::Value),
}

impl Node {
    /// Removes canonical key `key` from a schema table and returns its value.
    pub(crate) fn take(&mut self, key: &str) -> Option<Node> {
        match self {
            Node::Table(entries) => {
                let at = entries.iter().position(|(k, _)| *k == key)?;
                Some(entries.remove(at).1)
            }
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Node::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_list(&self) -> Option<&[Node]> {
        match self {
            Node::List(items) => Some(items),
            _ => None,
        }
    }
}

/// Sets `key` in a schema table: replaces an earlier value in place (a later key that matched
/// the same field ignoring case wins), else appends.
pub(crate) fn set(table: &mut Vec<(&'static str, Node)>, key: &'static str, value: Node) {
    match table.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => table.push((key, value)),
    }
}

impl<'de> IntoDeserializer<'de, Error> for Node {
    type Deserializer = Node;

    fn into_deserializer(self) -> Node {
        self
    }
}

impl<'de> Deserializer<'de> for Node {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self {
            Node::Str(s) => visitor.visit_string(s),
            Node::Int(i) => visitor.visit_i64(i),
            Node::Float(f) => visitor.visit_f64(f),
            Node::Bool(b) => visitor.visit_bool(b),
            Node::List(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter());
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Node::Table(entries) => {
                let mut map = MapDeserializer::new(entries.into_iter());
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            Node::Map(entries) => {
                let mut map = MapDeserializer::new(entries.into_iter());
                let value = visitor.visit_map(&mut map)?;
                map.end()?;
                Ok(value)
            }
            Node::Raw(v) => v.deserialize_any(visitor).map_err(Error::custom),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self {
            Node::Str(s) => visitor.visit_enum(s.into_deserializer()),
            Node::Raw(v) => v
                .deserialize_enum(name, variants, visitor)
                .map_err(Error::custom),
            other => other.deserialize_any(visitor),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map struct identifier ignored_any
    }
}
