//! Shared helpers for txbed's integration tests.
