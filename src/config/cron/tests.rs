//! Unit tests for the parser internals.
