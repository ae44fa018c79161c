//! What relay and consumer share: the entry's fields, and reading raw stream replies.

use backstop_core::{Error, ErrorKind, Message, Result};
use redis::Value;

/// The message id field: stable across retries of one task.
pub(crate) const F_ID: &str = "msg_id";
/// The event type field.
pub(crate) const F_TYPE: &str = "event_type";
/// The business key field.
pub(crate) const F_KEY: &str = "biz_key";
/// The payload field.
pub(crate) const F_PAYLOAD: &str = "payload";
/// Header fields are `h.<name>`.
pub(crate) const HEADER_PREFIX: &str = "h.";

/// One stream entry: its id and fields, or `None` fields for an entry that was trimmed
/// (or deleted) while it sat in a pending list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub id: String,
    pub fields: Option<Vec<(String, String)>>,
}

impl Entry {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .as_ref()?
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The message this entry carries, or why not (a trimmed entry, a foreign one).
    pub fn message(&self, deliveries: u64) -> std::result::Result<Message, String> {
        if self.fields.is_none() {
            return Err("the entry was trimmed from the stream".into());
        }
        let need = |name: &str| {
            self.field(name)
                .map(str::to_owned)
                .ok_or_else(|| format!("the entry has no {name:?} field"))
        };
        let mut m = Message::new(need(F_ID)?, need(F_TYPE)?, need(F_KEY)?, need(F_PAYLOAD)?);
        let mut headers: Vec<(String, String)> = self
            .fields
            .iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.strip_prefix(HEADER_PREFIX)?.to_owned(), v.clone())))
            .collect();
        headers.sort();
        m.headers = headers;
        m.deliveries = deliveries;
        Ok(m)
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn unexpected(what: &str) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        "read_stream",
        format!("redis: unexpected reply shape ({what})"),
    )
}

/// `[id, [field, value, …] | nil]`
fn entry(v: &Value) -> Result<Entry> {
    let Value::Array(parts) = v else {
        return Err(unexpected("an entry is not an array"));
    };
    let id = parts
        .first()
        .and_then(text)
        .ok_or_else(|| unexpected("an entry has no id"))?;
    let fields = match parts.get(1) {
        None | Some(Value::Nil) => None,
        Some(Value::Array(kv)) => Some(
            kv.chunks(2)
                .filter_map(|p| Some((text(p.first()?)?, text(p.get(1)?)?)))
                .collect(),
        ),
        Some(Value::Map(kv)) => Some(
            kv.iter()
                .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
                .collect(),
        ),
        Some(_) => return Err(unexpected("an entry's fields")),
    };
    Ok(Entry { id, fields })
}

/// A list of entries (`XRANGE`, one stream of `XREADGROUP`, `XAUTOCLAIM`'s claimed).
pub(crate) fn entries(v: &Value) -> Result<Vec<Entry>> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Array(items) => items.iter().map(entry).collect(),
        _ => Err(unexpected("entries are not an array")),
    }
}

/// The entries of the one stream an `XREADGROUP` read (nil when it timed out).
pub(crate) fn read_reply(v: &Value) -> Result<Vec<Entry>> {
    match v {
        Value::Nil => Ok(Vec::new()),
        Value::Array(streams) => match streams.first() {
            None => Ok(Vec::new()),
            Some(Value::Array(kv)) => entries(kv.get(1).unwrap_or(&Value::Nil)),
            Some(_) => Err(unexpected("a stream of the read")),
        },
        Value::Map(streams) => match streams.first() {
            None => Ok(Vec::new()),
            Some((_, v)) => entries(v),
        },
        _ => Err(unexpected("the read")),
    }
}

/// `XAUTOCLAIM`: the next cursor, the claimed entries, the ids it dropped from the
/// pending list because they are no longer in the stream.
pub(crate) fn autoclaim_reply(v: &Value) -> Result<(String, Vec<Entry>, Vec<String>)> {
    let Value::Array(parts) = v else {
        return Err(unexpected("XAUTOCLAIM"));
    };
    let next = parts
        .first()
        .and_then(text)
        .ok_or_else(|| unexpected("XAUTOCLAIM cursor"))?;
    let claimed = entries(parts.get(1).unwrap_or(&Value::Nil))?;
    let deleted = match parts.get(2) {
        Some(Value::Array(ids)) => ids.iter().filter_map(text).collect(),
        _ => Vec::new(),
    };
    Ok((next, claimed, deleted))
}

/// A stream id as `(milliseconds, sequence)`, for comparisons.
pub(crate) fn parse_id(id: &str) -> Option<(u64, u64)> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_entries_and_trimmed_ones() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("s"),
            Value::Array(vec![
                Value::Array(vec![
                    bulk("1-0"),
                    Value::Array(vec![
                        bulk(F_ID),
                        bulk("m1"),
                        bulk(F_TYPE),
                        bulk("T"),
                        bulk(F_KEY),
                        bulk("k"),
                        bulk(F_PAYLOAD),
                        bulk("{}"),
                        bulk("h.trace"),
                        bulk("abc"),
                    ]),
                ]),
                Value::Array(vec![bulk("2-0"), Value::Nil]),
            ]),
        ])]);
        let got = read_reply(&reply).unwrap();
        assert_eq!(got.len(), 2);
        let m = got[0].message(3).unwrap();
        assert_eq!(
            (m.id.as_str(), m.biz_key.as_str(), m.deliveries),
            ("m1", "k", 3)
        );
        assert_eq!(m.headers, vec![("trace".to_owned(), "abc".to_owned())]);
        assert_eq!(got[1].fields, None);
        assert!(got[1].message(1).unwrap_err().contains("trimmed"));
        assert_eq!(read_reply(&Value::Nil).unwrap(), vec![]);
        assert_eq!(parse_id("17-3"), Some((17, 3)));
    }
}
