//! The guide stays true to the code: every method a backend implements is named in
//! "Writing a backend", every file "Contributing" names exists, and the README stays a
//! front page.

#![allow(clippy::expect_used, clippy::unwrap_used)] // a test says what it expects by panicking

use std::path::Path;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The methods of `trait name` in `source`.
fn trait_methods(source: &str, name: &str) -> Vec<String> {
    let start = source
        .find(&format!("pub trait {name}"))
        .unwrap_or_else(|| panic!("no trait {name}"));
    let body = &source[start..];
    let end = body.find("\n}\n").expect("the trait's end");
    body[..end]
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = l.strip_prefix("async ").unwrap_or(l);
            l.strip_prefix("fn ")
        })
        .map(|l| l.split(['(', '<']).next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn writing_a_backend_names_every_method_a_backend_implements() {
    let chapter = read("docs/guide/writing-a-backend.md");
    for (file, name) in [
        ("core/src/driver/mod.rs", "Driver"),
        ("core/src/driver/enqueue.rs", "EnqueueSql"),
        ("core/src/driver/statement.rs", "OwnConnection"),
        ("core/src/driver/url.rs", "UrlStore"),
    ] {
        let methods = trait_methods(&read(file), name);
        assert!(!methods.is_empty(), "{name} has methods");
        for m in methods {
            assert!(
                chapter.contains(&format!("`{m}`")) || chapter.contains(&format!("`{m}(")),
                "docs/guide/writing-a-backend.md does not name {name}::{m}"
            );
        }
    }
}

#[test]
fn contributing_names_files_that_exist() {
    let chapter = read("docs/guide/contributing.md");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut named = 0;
    for word in chapter.split('`') {
        let looks_like_a_file = (word.starts_with("core/")
            || word.starts_with("testkit/")
            || word.starts_with("console/")
            || word.starts_with("cli/")
            || word.starts_with("src/")
            || word.starts_with("scripts/"))
            && !word.contains(' ');
        if looks_like_a_file {
            named += 1;
            assert!(
                root.join(word).exists(),
                "contributing.md names {word}, which does not exist"
            );
        }
    }
    assert!(named >= 8, "contributing.md names the files of a change");
}

#[test]
fn the_readme_is_a_front_page() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 350,
        "README.md has {lines} lines: move the rest into the guide"
    );
}
