//! What a task carries for people and tools beside its payload: tags, a JSON metadata
//! object (both set at enqueue, both filters of [`TaskStore::list`]), and the output its
//! handler recorded ([`Context::record_output`]).
//!
//! Tags are stored in one text column in a canonical form, `,a,b,` (sorted, each once,
//! between commas), so "has tag `a`" is a search for `,a,` that every backend spells
//! with its own substring function: no wildcard to escape, no JSON array function that
//! differs between MySQL and MariaDB. Metadata is stored as the JSON text given.
//!
//! [`TaskStore::list`]: crate::TaskStore::list
//! [`Context::record_output`]: crate::Context::record_output

use crate::error::{Error, Result};
use crate::limits::{
    MAX_METADATA_BYTES, MAX_METADATA_KEY_BYTES, MAX_OUTPUT_BYTES, MAX_TAGS, MAX_TAG_BYTES,
};

/// Whether `c` may appear in a tag: an ASCII letter or digit, `_`, `.`, `:`, `/` or `-`
/// (never a comma, which separates tags in their column, nor anything that ends an SQL
/// literal).
///
/// ```
/// use backstop_core::limits::is_tag_char;
/// assert!("tenant:acme/eu-1".chars().all(is_tag_char));
/// assert!(!is_tag_char(','));
/// ```
pub fn is_tag_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '/' | '-')
}

/// Check a tag: 1 to [`MAX_TAG_BYTES`] bytes of [`is_tag_char`] characters.
pub(crate) fn check_tag(operation: &'static str, tag: &str) -> Result<()> {
    match tag_problem(tag) {
        Some(problem) => Err(Error::invalid_input(operation, problem)),
        None => Ok(()),
    }
}

/// What is wrong with `tag`, if anything.
fn tag_problem(tag: &str) -> Option<String> {
    if tag.is_empty() || tag.len() > MAX_TAG_BYTES {
        return Some(format!(
            "tag must be 1 to {MAX_TAG_BYTES} bytes, got {}",
            tag.len()
        ));
    }
    if !tag.chars().all(is_tag_char) {
        return Some(format!(
            "tag {tag:?} may hold only ASCII letters, digits, '_', '.', ':', '/' and '-'"
        ));
    }
    None
}

/// The canonical column text of `current` (canonical already, or empty) with `more`
/// added: sorted, each once, `,a,b,`; empty for no tag. `Err` names the first bad tag,
/// or too many.
pub(crate) fn add_tags<I, S>(current: &str, more: I) -> std::result::Result<String, String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let mut tags: Vec<String> = decode_tags(current);
    for tag in more {
        let tag = tag.into();
        if let Some(problem) = tag_problem(&tag) {
            return Err(problem);
        }
        tags.push(tag);
    }
    tags.sort();
    tags.dedup();
    if tags.len() > MAX_TAGS {
        return Err(format!(
            "a task has at most {MAX_TAGS} tags, got {}",
            tags.len()
        ));
    }
    Ok(encode_tags(&tags))
}

/// `,a,b,` for `tags` (already sorted and unique); empty for none.
fn encode_tags(tags: &[String]) -> String {
    if tags.is_empty() {
        return String::new();
    }
    format!(",{},", tags.join(","))
}

/// The tags of a column text (`,a,b,`, or empty), in order.
pub(crate) fn decode_tags(column: &str) -> Vec<String> {
    column
        .split(',')
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Check a metadata document: a JSON object of at most [`MAX_METADATA_BYTES`].
pub(crate) fn metadata_problem(json: &str) -> Option<String> {
    if json.len() > MAX_METADATA_BYTES {
        return Some(format!(
            "metadata is {} bytes, over the limit of {MAX_METADATA_BYTES} bytes",
            json.len()
        ));
    }
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(_)) => None,
        Ok(_) => Some("metadata must be a JSON object".to_owned()),
        Err(e) => Some(format!("metadata is not valid JSON: {e}")),
    }
}

/// Check a metadata key a list filters on: 1 to [`MAX_METADATA_KEY_BYTES`] bytes of ASCII
/// letters, digits, `_` and `-` (a backend writes it into its JSON path as a literal).
pub(crate) fn check_metadata_key(operation: &'static str, key: &str) -> Result<()> {
    let ok = !key.is_empty()
        && key.len() <= MAX_METADATA_KEY_BYTES
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
    if ok {
        return Ok(());
    }
    Err(Error::invalid_input(
        operation,
        format!(
            "metadata key {key:?} must be 1 to {MAX_METADATA_KEY_BYTES} bytes of ASCII \
             letters, digits, '_' and '-'"
        ),
    ))
}

/// Check a handler's output: a JSON document of at most [`MAX_OUTPUT_BYTES`].
pub(crate) fn check_output(operation: &'static str, json: &str) -> Result<()> {
    let problem = if json.len() > MAX_OUTPUT_BYTES {
        Some(format!(
            "output is {} bytes, over the limit of {MAX_OUTPUT_BYTES} bytes",
            json.len()
        ))
    } else {
        serde_json::from_str::<serde::de::IgnoredAny>(json)
            .err()
            .map(|e| format!("output is not valid JSON: {e}"))
    };
    match problem {
        Some(problem) => Err(Error::invalid_input(operation, problem)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_sorted_unique_and_between_commas() {
        let column = add_tags("", ["b", "a", "b"]).unwrap();
        assert_eq!(column, ",a,b,");
        assert_eq!(add_tags(&column, ["c"]).unwrap(), ",a,b,c,");
        assert_eq!(decode_tags(",a,b,"), vec!["a", "b"]);
        assert_eq!(add_tags("", Vec::<String>::new()).unwrap(), "");
        assert!(decode_tags("").is_empty());
    }

    #[test]
    fn bad_tags_are_named() {
        assert!(add_tags("", ["a,b"]).unwrap_err().contains("a,b"));
        assert!(add_tags("", [""]).unwrap_err().contains("1 to"));
        let many: Vec<String> = (0..=MAX_TAGS).map(|i| format!("t{i}")).collect();
        assert!(add_tags("", many).unwrap_err().contains("at most"));
        let long = "x".repeat(MAX_TAG_BYTES + 1);
        assert!(add_tags("", [long]).is_err());
    }

    #[test]
    fn metadata_is_a_bounded_object() {
        assert_eq!(metadata_problem(r#"{"a":1}"#), None);
        assert!(metadata_problem("[1]").unwrap().contains("object"));
        assert!(metadata_problem("{").unwrap().contains("JSON"));
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(MAX_METADATA_BYTES));
        assert!(metadata_problem(&big).unwrap().contains("limit"));
        assert!(check_metadata_key("list", "tenant_id-2").is_ok());
        assert!(check_metadata_key("list", "a.b").is_err());
        assert!(check_output("set_output", "{\"rows\":3}").is_ok());
        assert!(check_output("set_output", "nope").is_err());
    }
}
