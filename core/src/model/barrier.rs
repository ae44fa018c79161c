//! The participant barrier's vocabulary: which call of which branch of which global
//! transaction arrives, and what the barrier says about it.

use std::fmt;

use crate::error::Result;
use crate::limits;

/// The operation of a branch call: the forward and backward halves of a saga step or a
/// TCC branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BranchOp {
    /// A saga step's forward action.
    Action,
    /// A saga step's compensation: undoes its [`Action`](Self::Action).
    Compensate,
    /// A TCC branch's try: checks and reserves.
    Try,
    /// A TCC branch's confirm: uses what its try reserved.
    Confirm,
    /// A TCC branch's cancel: releases what its [`Try`](Self::Try) reserved.
    Cancel,
}

impl BranchOp {
    /// Every operation.
    pub const ALL: [BranchOp; 5] = [
        BranchOp::Action,
        BranchOp::Compensate,
        BranchOp::Try,
        BranchOp::Confirm,
        BranchOp::Cancel,
    ];

    /// Its name in the barrier table: `action`, `compensate`, `try`, `confirm`, `cancel`.
    pub fn as_str(self) -> &'static str {
        match self {
            BranchOp::Action => "action",
            BranchOp::Compensate => "compensate",
            BranchOp::Try => "try",
            BranchOp::Confirm => "confirm",
            BranchOp::Cancel => "cancel",
        }
    }

    /// The operation named `name` ([`as_str`](Self::as_str)), exactly.
    pub fn parse(name: &str) -> Option<BranchOp> {
        Self::ALL.into_iter().find(|op| op.as_str() == name)
    }

    /// The forward operation this one undoes: [`Action`](Self::Action) for
    /// [`Compensate`](Self::Compensate), [`Try`](Self::Try) for [`Cancel`](Self::Cancel);
    /// `None` for a forward operation.
    pub fn undoes(self) -> Option<BranchOp> {
        match self {
            BranchOp::Compensate => Some(BranchOp::Action),
            BranchOp::Cancel => Some(BranchOp::Try),
            _ => None,
        }
    }
}

impl fmt::Display for BranchOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One call of a branch, as the participant receives it: the global transaction's id
/// (`gid`, a saga's or a TCC transaction's), the branch within it, and the operation.
/// Checked when made: each id non-empty, at most [`limits::MAX_BRANCH_ID_BYTES`] bytes,
/// without control characters.
///
/// ```
/// use backstop_core::{BranchCall, BranchOp, ErrorKind};
/// let call = BranchCall::new("order-42", "stock", BranchOp::Compensate).unwrap();
/// assert_eq!((call.gid(), call.branch_id(), call.op()), ("order-42", "stock", BranchOp::Compensate));
/// let bad = BranchCall::new("", "stock", BranchOp::Action).unwrap_err();
/// assert_eq!(bad.kind(), ErrorKind::InvalidInput);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BranchCall {
    gid: String,
    branch_id: String,
    op: BranchOp,
}

impl BranchCall {
    /// The call of operation `op` on branch `branch_id` of global transaction `gid`;
    /// `InvalidInput` when an id is empty, too long or holds a control character.
    pub fn new(gid: impl Into<String>, branch_id: impl Into<String>, op: BranchOp) -> Result<Self> {
        let (gid, branch_id) = (gid.into(), branch_id.into());
        check_id("barrier", "gid", &gid)?;
        check_id("barrier", "branch_id", &branch_id)?;
        Ok(BranchCall { gid, branch_id, op })
    }

    /// The global transaction's id.
    pub fn gid(&self) -> &str {
        &self.gid
    }

    /// The branch's id within it.
    pub fn branch_id(&self) -> &str {
        &self.branch_id
    }

    /// The operation called.
    pub fn op(&self) -> BranchOp {
        self.op
    }

    /// The same branch's call of `op`.
    pub fn with_op(&self, op: BranchOp) -> BranchCall {
        BranchCall { op, ..self.clone() }
    }

    /// The names of the message headers that carry a call ([`headers`](Self::headers)):
    /// the global transaction, the branch, the operation.
    pub const HEADERS: [&'static str; 3] = ["backstop-gid", "backstop-branch", "backstop-op"];

    /// The call as message headers, named as in [`HEADERS`](Self::HEADERS): a message
    /// that carries them is applied behind the consumer's barrier (see
    /// [`Message::branch`](crate::Message::branch)).
    pub fn headers(&self) -> [(&'static str, &str); 3] {
        let [gid, branch, op] = Self::HEADERS;
        [
            (gid, self.gid.as_str()),
            (branch, self.branch_id.as_str()),
            (op, self.op.as_str()),
        ]
    }

    /// The call that `headers` carry ([`HEADERS`](Self::HEADERS)); `None` when they carry
    /// none of its headers. `InvalidInput` when they carry some but not all, an unknown
    /// operation, or an id [`new`](Self::new) refuses.
    ///
    /// ```
    /// use backstop_core::{BranchCall, BranchOp};
    /// let call = BranchCall::new("saga:order:42", "stock", BranchOp::Compensate).unwrap();
    /// let headers: Vec<(String, String)> = call
    ///     .headers()
    ///     .iter()
    ///     .map(|(k, v)| (k.to_string(), v.to_string()))
    ///     .collect();
    /// assert_eq!(BranchCall::from_headers(&headers).unwrap(), Some(call));
    /// assert_eq!(BranchCall::from_headers(&[]).unwrap(), None);
    /// ```
    pub fn from_headers(headers: &[(String, String)]) -> Result<Option<BranchCall>> {
        const OP: &str = "barrier";
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let [gid, branch, op] = Self::HEADERS.map(get);
        match (gid, branch, op) {
            (None, None, None) => Ok(None),
            (Some(gid), Some(branch), Some(op)) => {
                let op = BranchOp::parse(op).ok_or_else(|| {
                    crate::Error::invalid_input(OP, format!("unknown branch operation {op:?}"))
                })?;
                BranchCall::new(gid, branch, op).map(Some)
            }
            _ => Err(crate::Error::invalid_input(
                OP,
                format!(
                    "a message carries some of the headers {:?} but not all",
                    Self::HEADERS
                ),
            )),
        }
    }

    /// The call in member `field` of a JSON object `payload` (an object with `gid`,
    /// `branch_id` and `op`); `None` when the payload has no such member (or it is
    /// `null`, or the payload is not an object). `InvalidInput` when the member is not a
    /// valid call. What the relay publishes as headers
    /// (the Redis relay's `RelayOptions::branch_field`).
    ///
    /// ```
    /// use backstop_core::{BranchCall, BranchOp};
    /// let payload = r#"{"sku": 7, "branch": {"gid": "g-1", "branch_id": "stock", "op": "action"}}"#;
    /// let call = BranchCall::from_payload_field(payload, "branch").unwrap().unwrap();
    /// assert_eq!((call.gid(), call.branch_id(), call.op()), ("g-1", "stock", BranchOp::Action));
    /// assert_eq!(BranchCall::from_payload_field(payload, "other").unwrap(), None);
    /// ```
    pub fn from_payload_field(payload: &str, field: &str) -> Result<Option<BranchCall>> {
        const OP: &str = "barrier";
        let Ok(serde_json::Value::Object(mut object)) = serde_json::from_str(payload) else {
            return Ok(None);
        };
        let value = match object.remove(field) {
            None | Some(serde_json::Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let text = |name: &str| {
            value.get(name).and_then(|v| v.as_str()).ok_or_else(|| {
                crate::Error::invalid_input(
                    OP,
                    format!("the payload's {field:?} has no string {name:?}"),
                )
            })
        };
        let op = text("op")?;
        let op = BranchOp::parse(op).ok_or_else(|| {
            crate::Error::invalid_input(OP, format!("unknown branch operation {op:?}"))
        })?;
        BranchCall::new(text("gid")?, text("branch_id")?, op).map(Some)
    }
}

impl serde::Serialize for BranchCall {
    /// As `{"gid": …, "branch_id": …, "op": …}` (what
    /// [`from_payload_field`](BranchCall::from_payload_field) reads).
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("BranchCall", 3)?;
        st.serialize_field("gid", &self.gid)?;
        st.serialize_field("branch_id", &self.branch_id)?;
        st.serialize_field("op", self.op.as_str())?;
        st.end()
    }
}

/// Check a global transaction id as [`BranchCall::new`] does, for operation `op`.
pub(crate) fn check_gid(op: &'static str, gid: &str) -> Result<()> {
    check_id(op, "gid", gid)
}

fn check_id(op: &'static str, what: &str, id: &str) -> Result<()> {
    limits::check_key(op, what, id, limits::MAX_BRANCH_ID_BYTES)
}

/// A record of the participant barrier (see
/// [`TaskStore::barrier_records`](crate::TaskStore::barrier_records)): the row of one
/// operation of one branch, and the operation that wrote it — itself, or the
/// compensation that came first.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BarrierRecord {
    /// The global transaction.
    pub gid: String,
    /// The branch.
    pub branch_id: String,
    /// The operation the record stands for.
    pub op: BranchOp,
    /// The operation that wrote it: `op` itself, or (for a forward operation) the
    /// compensation or cancel that arrived before it.
    pub reason: BranchOp,
    /// When it was written (database time).
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// What the barrier says of a [`BranchCall`], decided on the participant's own
/// transaction. Only [`Run`](Self::Run) runs the business logic; every verdict commits
/// (the records it wrote are what refuses the next call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Barrier {
    /// The first call of this operation on this branch: run it.
    Run,
    /// This operation ran on this branch before (a second delivery): skip it.
    Duplicate,
    /// A compensation or cancel whose forward call never ran here (an empty
    /// compensation): nothing to undo. Its record now refuses that forward call.
    EmptyCompensation,
    /// A forward call that arrives after its compensation or cancel (hanging): refused,
    /// since running it would reserve what nobody will release.
    Hanging,
}

impl Barrier {
    /// Whether the business logic runs: only for [`Run`](Self::Run).
    pub fn should_run(self) -> bool {
        self == Barrier::Run
    }

    /// Its name, as the `verdict` label of `backstop_barrier_total` has it: `run`,
    /// `duplicate`, `empty_compensation`, `hanging`.
    pub fn as_str(self) -> &'static str {
        match self {
            Barrier::Run => "run",
            Barrier::Duplicate => "duplicate",
            Barrier::EmptyCompensation => "empty_compensation",
            Barrier::Hanging => "hanging",
        }
    }
}

impl fmt::Display for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn ids_are_checked_and_ops_name_what_they_undo() {
        for (gid, branch) in [
            ("", "b"),
            ("g", ""),
            ("g\n", "b"),
            (&"x".repeat(limits::MAX_BRANCH_ID_BYTES + 1), "b"),
        ] {
            let e = BranchCall::new(gid, branch, BranchOp::Try).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{gid:?} {branch:?}");
            assert_eq!(e.operation(), "barrier");
        }
        let max = "x".repeat(limits::MAX_BRANCH_ID_BYTES);
        assert!(BranchCall::new(max.as_str(), max.as_str(), BranchOp::Try).is_ok());
        assert_eq!(BranchOp::Cancel.undoes(), Some(BranchOp::Try));
        assert_eq!(BranchOp::Compensate.undoes(), Some(BranchOp::Action));
        assert_eq!(BranchOp::Confirm.undoes(), None);
        assert!(Barrier::Run.should_run() && !Barrier::Hanging.should_run());
    }
}
