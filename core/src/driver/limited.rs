//! The second part of a batch claim: the limited types its plain claim passed by, each
//! claimed in a transaction of its own ([`claim_limited_types`]).

use std::future::Future;

use super::RawTask;
use crate::error::{Error, Result};

/// Finish a batch claim of at most `limit` tasks: `claimed` holds what its plain claim
/// took, `limited` the limited types with a due task it found (the plain claim passes
/// them by, see [`Gate`](super::Gate)), or why it could not tell; `claim` claims one of
/// them in a transaction of its own, at most the count it is given. The types are
/// claimed in turn while the limit leaves room.
///
/// # Contract
///
/// A claimed row is never dropped. Once a batch holds rows, a failure to list or claim
/// the limited types ends it with the rows it holds (the failure logged at `warn`):
/// they are running under this owner, and an error would leave them to the dead-task
/// sweep. The types not claimed are found again by the next poll. A batch that holds
/// nothing returns the failure.
///
/// ```
/// # use backstop_core::driver::{claim_limited_types, RawTask};
/// # use backstop_core::Result;
/// # async fn run(claimed: Vec<RawTask>, limited: Result<Vec<String>>) -> Result<Vec<RawTask>> {
/// let batch = claim_limited_types(claimed, limited, 50, |event_type: String, left| async move {
///     // lock the type's queue row, claim at most `left` within its room, commit
///     # let _ = (event_type, left);
///     Ok(Vec::new())
/// })
/// .await?;
/// # Ok(batch)
/// # }
/// ```
pub async fn claim_limited_types<T, F, Fut>(
    mut claimed: Vec<RawTask>,
    limited: Result<Vec<T>>,
    limit: usize,
    mut claim: F,
) -> Result<Vec<RawTask>>
where
    F: FnMut(T, usize) -> Fut,
    Fut: Future<Output = Result<Vec<RawTask>>>,
{
    let limited = match limited {
        Ok(limited) => limited,
        Err(e) => return keep(claimed, e),
    };
    for event_type in limited {
        let left = limit.saturating_sub(claimed.len());
        if left == 0 {
            break;
        }
        match claim(event_type, left).await {
            Ok(rows) => claimed.extend(rows),
            Err(e) => return keep(claimed, e),
        }
    }
    Ok(claimed)
}

/// The rows claimed so far despite `e`, or `e` when there are none.
fn keep(claimed: Vec<RawTask>, e: Error) -> Result<Vec<RawTask>> {
    if claimed.is_empty() {
        return Err(e);
    }
    tracing::warn!(
        error = %e,
        claimed = claimed.len(),
        "claiming the limited types failed: the batch keeps the tasks it claimed"
    );
    Ok(claimed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn failure() -> Error {
        Error::new(ErrorKind::Unavailable, "claim", "connection lost")
    }

    fn ids(batch: &[RawTask]) -> Vec<i64> {
        batch.iter().map(|t| t.id).collect()
    }

    /// Each limited type in turn, with what the limit leaves; none once it is reached.
    #[tokio::test]
    async fn claims_each_type_with_what_is_left() {
        let mut asked = Vec::new();
        let batch = claim_limited_types(
            vec![RawTask::due(1)],
            Ok(vec![("a", 2), ("b", 5), ("c", 1)]),
            4,
            |(t, has): (&str, i64), left| {
                asked.push((t, left));
                async move {
                    Ok((0..has.min(left as i64))
                        .map(|i| RawTask::due(10 * has + i))
                        .collect())
                }
            },
        )
        .await;
        assert_eq!(ids(&batch.unwrap_or_default()), [1, 20, 21, 50]);
        assert_eq!(asked, [("a", 3), ("b", 1)]);
    }

    /// A failure after rows were claimed keeps them; with none claimed it is returned.
    #[tokio::test]
    async fn a_failure_never_drops_claimed_rows() {
        let fail_second = |t: u8, _left| async move {
            match t {
                1 => Ok(vec![RawTask::due(7)]),
                _ => Err(failure()),
            }
        };
        let kept =
            claim_limited_types(vec![RawTask::due(1)], Ok(vec![1, 2, 1]), 10, fail_second).await;
        assert_eq!(ids(&kept.unwrap_or_default()), [1, 7]);
        let from_limited = claim_limited_types(Vec::new(), Ok(vec![1, 2]), 10, fail_second).await;
        assert_eq!(ids(&from_limited.unwrap_or_default()), [7]);
        let nothing = claim_limited_types(Vec::new(), Ok(vec![2, 1]), 10, fail_second).await;
        assert_eq!(
            nothing.map_err(|e| e.kind()).err(),
            Some(ErrorKind::Unavailable)
        );
        let listed =
            claim_limited_types(vec![RawTask::due(3)], Err(failure()), 10, fail_second).await;
        assert_eq!(ids(&listed.unwrap_or_default()), [3]);
        let unlisted =
            claim_limited_types(Vec::new(), Err::<Vec<u8>, _>(failure()), 10, fail_second).await;
        assert!(unlisted.is_err());
    }
}
