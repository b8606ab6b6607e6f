//! Empty: present so that the `[build-dependencies]` entry (syn's features for the
//! proc-macro crates) takes part in feature resolution.
fn main() {}
