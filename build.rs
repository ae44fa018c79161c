//! Makes the guide (`docs/guide/*.md`) into the rustdoc module `backstop::guide`: each
//! chapter's links to other chapters become links to their modules, and a link to a
//! chapter that does not exist, or to a heading a chapter does not have, fails the build.

// A build script reports what it cannot do by failing the build.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

fn main() {
    let dir = Path::new("docs/guide");
    println!("cargo:rerun-if-changed=docs/guide");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("guide");
    fs::create_dir_all(&out).expect("the output folder");
    let mut chapters = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("docs/guide") {
        let path = entry.expect("a folder entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            println!("cargo:rerun-if-changed={}", path.display());
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            chapters.insert(name, fs::read_to_string(&path).expect("a chapter"));
        }
    }
    let anchors: BTreeMap<&str, Vec<String>> = chapters
        .iter()
        .map(|(name, text)| (name.as_str(), headings(text)))
        .collect();
    let mut broken = Vec::new();
    for (name, text) in &chapters {
        let rewritten = rewrite(text, |target| {
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let module = match file {
                "" => return None, // a heading of this chapter
                "../../README.md" => "crate".to_owned(),
                f if f.ends_with(".md") && !f.contains('/') => {
                    if !chapters.contains_key(f) {
                        broken.push(format!("{name}: no chapter {f}"));
                        return None;
                    }
                    module_path(f)
                }
                _ => return None, // an outside link
            };
            let heading_file = if file.is_empty() { name.as_str() } else { file };
            if !fragment.is_empty()
                && anchors
                    .get(heading_file)
                    .is_some_and(|a| !a.iter().any(|h| h == fragment))
            {
                broken.push(format!("{name}: no heading #{fragment} in {heading_file}"));
            }
            Some(if fragment.is_empty() {
                module
            } else {
                format!("{module}#{fragment}")
            })
        });
        fs::write(out.join(name), rewritten).expect("the rewritten chapter");
    }
    // one module per chapter (the index is the guide's own docs)
    let modules: String = chapters
        .keys()
        .filter(|name| name.as_str() != "README.md")
        .map(|name| {
            let module = module_path(name).trim_start_matches("crate::guide::").to_owned();
            format!(
                "#[doc = include_str!(concat!(env!(\"OUT_DIR\"), \"/guide/{name}\"))]\npub mod {module} {{}}\n\n"
            )
        })
        .collect();
    fs::write(out.join("modules.rs"), modules).expect("the guide's modules");
    assert!(
        broken.is_empty(),
        "broken links in the guide:\n{}",
        broken.join("\n")
    );
}

/// The module of chapter `file`: `getting-started.md` is `crate::guide::getting_started`.
fn module_path(file: &str) -> String {
    match file {
        "README.md" => "crate::guide".to_owned(),
        f => format!(
            "crate::guide::{}",
            f.trim_end_matches(".md").replace('-', "_")
        ),
    }
}

/// `text` with the target of each Markdown link `](target)` outside code replaced by
/// what `map` answers (kept when it answers `None`).
fn rewrite(text: &str, mut map: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fenced = false;
    for line in text.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            out.push_str(line);
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            out.push_str(&rest[..i + 2]);
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else {
                rest = after;
                break;
            };
            let target = &after[..end];
            out.push_str(&map(target).unwrap_or_else(|| target.to_owned()));
            rest = &after[end..];
        }
        out.push_str(rest);
    }
    out
}

/// The anchors of a chapter's headings, as GitHub and rustdoc make them: lower case,
/// spaces to `-`, punctuation other than `-` and `_` dropped.
fn headings(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        out.push(slug);
    }
    out
}
