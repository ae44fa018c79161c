//! The guide: the chapters of `docs/guide/`, rendered here so that docs.rs shows them
//! and `cargo test` compiles their Rust snippets (one module per chapter, made by the
//! build script, which also checks the links between them).
#![doc = include_str!(concat!(env!("OUT_DIR"), "/guide/README.md"))]

include!(concat!(env!("OUT_DIR"), "/guide/modules.rs"));
