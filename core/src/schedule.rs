//! Periodic tasks: cron expressions (in UTC or an IANA time zone) and fixed intervals.

use std::fmt;
use std::time::Duration;

use chrono::{
    DateTime, Datelike, Duration as ChronoDuration, LocalResult, NaiveDate, NaiveDateTime,
    TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;

use crate::error::{Error, Result};
use crate::model::NewTask;

/// When a periodic task fires: a cron expression, in UTC or in an IANA time zone
/// ([`in_zone`](Self::in_zone)), or a fixed interval.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use backstop_core::Schedule;
///
/// let nightly = Schedule::cron("30 3 * * *").unwrap(); // 03:30 every day
/// let t = Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap();
/// assert_eq!(nightly.after(t), Utc.with_ymd_and_hms(2026, 12, 2, 3, 30, 0).unwrap());
///
/// let every = Schedule::every(std::time::Duration::from_secs(300)).unwrap();
/// assert_eq!(every.after(t), Utc.with_ymd_and_hms(2026, 12, 1, 12, 5, 0).unwrap());
///
/// assert!(Schedule::cron("61 * * * *").is_err());
///
/// // 03:30 on Paris's wall clock: 02:30 UTC in winter (CET, UTC+1)
/// let paris = Schedule::cron("30 3 * * *").unwrap().in_zone("Europe/Paris").unwrap();
/// assert_eq!(paris.after(t), Utc.with_ymd_and_hms(2026, 12, 2, 2, 30, 0).unwrap());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Schedule(Kind);

#[derive(Clone, PartialEq, Eq)]
enum Kind {
    Cron { text: String, cron: Cron, zone: Tz },
    Every(Duration),
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Kind::Cron {
                text,
                zone: Tz::UTC,
                ..
            } => write!(f, "Schedule::cron({text:?})"),
            Kind::Cron { text, zone, .. } => {
                write!(f, "Schedule::cron({text:?}).in_zone({:?})", zone.name())
            }
            Kind::Every(d) => write!(f, "Schedule::every({d:?})"),
        }
    }
}

impl Schedule {
    /// A standard five-field cron expression, in UTC: minute (0–59), hour (0–23), day of
    /// month (1–31), month (1–12 or `jan`–`dec`), day of week (0–7, 0 and 7 are Sunday, or
    /// `sun`–`sat`). Each field is `*`, a value, a range `a-b`, a step `*/n` or `a-b/n`,
    /// or a list of those separated by commas. As in cron, when both day fields are
    /// restricted a day matches either. Also `@hourly`, `@daily` (`@midnight`),
    /// `@weekly`, `@monthly`, `@yearly` (`@annually`). `InvalidInput` otherwise.
    pub fn cron(expression: &str) -> Result<Schedule> {
        let text = expression.trim();
        let expanded = match text {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            other => other,
        };
        let cron = Cron::parse(expanded).map_err(|why| {
            Error::invalid_input("schedule", format!("bad cron expression {text:?}: {why}"))
        })?;
        Ok(Schedule(Kind::Cron {
            text: text.to_owned(),
            cron,
            zone: Tz::UTC,
        }))
    }

    /// The cron expression read on the wall clock of the IANA time zone `zone`
    /// (`Europe/Paris`, `America/New_York`; the zone database is compiled in), daylight
    /// saving included:
    ///
    /// - a tick whose wall-clock time is skipped (the hour the clocks spring forward)
    ///   fires once, at the moment of the jump (`30 2 * * *` in New York fires at 03:00
    ///   EDT that day; several skipped ticks of one periodic are that one tick);
    /// - a tick whose wall-clock time comes twice (the hour the clocks fall back) fires
    ///   once, at its first occurrence.
    ///
    /// `InvalidInput` naming the zone when it is not one, or for an interval schedule
    /// ([`every`](Self::every) counts from the epoch, in no zone).
    ///
    /// ```
    /// use chrono::{TimeZone, Utc};
    /// use backstop_core::Schedule;
    ///
    /// let s = Schedule::cron("30 2 * * *").unwrap().in_zone("America/New_York").unwrap();
    /// // the night the clocks spring forward (2026-03-08): 02:30 is skipped, 03:00 EDT fires
    /// let eve = Utc.with_ymd_and_hms(2026, 3, 7, 12, 0, 0).unwrap();
    /// assert_eq!(s.after(eve), Utc.with_ymd_and_hms(2026, 3, 8, 7, 0, 0).unwrap());
    /// assert!(Schedule::cron("0 3 * * *").unwrap().in_zone("Mars/Olympus").is_err());
    /// ```
    pub fn in_zone(self, zone: &str) -> Result<Schedule> {
        let Kind::Cron { text, cron, .. } = self.0 else {
            return Err(Error::invalid_input(
                "schedule",
                "an interval schedule counts from the Unix epoch and takes no time zone",
            ));
        };
        let zone: Tz = zone.parse().map_err(|_| {
            Error::invalid_input(
                "schedule",
                format!("unknown time zone {zone:?}: expected an IANA name like Europe/Paris"),
            )
        })?;
        Ok(Schedule(Kind::Cron { text, cron, zone }))
    }

    /// The time zone of a cron schedule (UTC unless [`in_zone`](Self::in_zone) said
    /// otherwise); `None` for an interval.
    pub fn zone(&self) -> Option<&'static str> {
        match &self.0 {
            Kind::Cron { zone, .. } => Some(zone.name()),
            Kind::Every(_) => None,
        }
    }

    /// Every `interval` (100 ms to a year), on multiples of it since the Unix epoch:
    /// every instance computes the same ticks whenever it started.
    pub fn every(interval: Duration) -> Result<Schedule> {
        if interval < Duration::from_millis(100) || interval > crate::limits::MAX_INTERVAL {
            return Err(Error::invalid_input(
                "schedule",
                format!("an interval must be 100 ms to 365 days, got {interval:?}"),
            ));
        }
        Ok(Schedule(Kind::Every(interval)))
    }

    /// The first tick strictly after `t`.
    pub fn after(&self, t: DateTime<Utc>) -> DateTime<Utc> {
        match &self.0 {
            Kind::Every(d) => {
                let step = i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1);
                let next = (t.timestamp_millis().div_euclid(step) + 1).saturating_mul(step);
                DateTime::from_timestamp_millis(next).unwrap_or(DateTime::<Utc>::MAX_UTC)
            }
            Kind::Cron { cron, zone, .. } => cron.after(t, *zone),
        }
    }

    /// The last tick at or before `t`.
    pub fn at_or_before(&self, t: DateTime<Utc>) -> DateTime<Utc> {
        match &self.0 {
            Kind::Every(d) => {
                let step = i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1);
                let last = t.timestamp_millis().div_euclid(step).saturating_mul(step);
                DateTime::from_timestamp_millis(last).unwrap_or(DateTime::<Utc>::MIN_UTC)
            }
            Kind::Cron { cron, zone, .. } => cron.at_or_before(t, *zone),
        }
    }
}

/// What a periodic task does about ticks that passed while no engine ran it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Missed {
    /// They are skipped: the first tick fired is the next one after the engine starts
    /// (the default).
    #[default]
    Skip,
    /// The most recent one is fired at start (once, however many instances start: its
    /// key is its tick), the older ones are skipped. Only while it is younger than the
    /// engine's [`retention`](crate::EngineConfig::retention) of succeeded tasks (less a
    /// tenth, at most a minute, for clocks): an older tick's row may have been purged,
    /// and firing it would run the tick again, so it is skipped.
    CatchUpOne,
}

/// A task that fires on a [`Schedule`], registered with
/// [`EngineBuilder::periodic`](crate::EngineBuilder::periodic).
///
/// - **Exactly once per tick, with no leader.** Every engine instance that registers it
///   enqueues each tick's task, keyed `{name}@{tick}` (the tick in RFC 3339) under
///   [`Dedup::Forever`](crate::Dedup::Forever): one enqueue per tick inserts, the others
///   are its duplicates. The task is due at the tick (database time).
/// - **Missed ticks** follow [`Missed`]: after downtime, skip them (default) or fire the
///   latest one. Within a run, an instance that falls behind (a long pause) fires the
///   tick that was due and skips the ones it slept through.
/// - The template's event type, payload, retry policy, priority and timeout are kept;
///   its business key and due time are the tick's.
///
/// ```
/// use backstop_core::{Missed, NewTask, Periodic, Schedule};
/// let report = Periodic::new(
///     "nightly-report",
///     Schedule::cron("0 3 * * *").unwrap(),
///     NewTask::new("BUILD_REPORT", "-").json(&serde_json::json!({"kind": "daily"})),
/// )
/// .missed(Missed::CatchUpOne);
/// assert_eq!(report.name(), "nightly-report");
/// ```
#[derive(Debug, Clone)]
pub struct Periodic {
    name: String,
    schedule: Schedule,
    template: NewTask,
    missed: Missed,
}

impl Periodic {
    /// `template` enqueued on `schedule`, as `name` (1 to 64 bytes of `A–Z a–z 0–9 _ . :
    /// -`; part of each tick's business key).
    pub fn new(name: impl Into<String>, schedule: Schedule, template: NewTask) -> Periodic {
        Periodic {
            name: name.into(),
            schedule,
            template,
            missed: Missed::Skip,
        }
    }

    /// What to do about ticks missed while no engine ran (default [`Missed::Skip`]).
    pub fn missed(mut self, missed: Missed) -> Self {
        self.missed = missed;
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// Its missed-ticks policy.
    pub fn missed_policy(&self) -> Missed {
        self.missed
    }

    /// The task of the tick at `tick`.
    pub fn task_at(&self, tick: DateTime<Utc>) -> NewTask {
        let key = format!(
            "{}@{}",
            self.name,
            tick.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        );
        self.template
            .clone()
            .with_biz_key(key)
            .run_at(tick)
            .dedup(crate::model::Dedup::Forever)
    }

    /// Check the name and the template (as an enqueue would).
    pub(crate) fn validate(&self, max_payload_bytes: usize) -> Result<()> {
        crate::limits::check_event_type("register_periodic", &self.name).map_err(|_| {
            Error::config(
                "register_periodic",
                format!(
                    "periodic name {:?} must be 1 to 64 bytes of A-Z a-z 0-9 _ . : -",
                    self.name
                ),
            )
        })?;
        self.task_at(Utc::now())
            .validate(max_payload_bytes)
            .map_err(|e| {
                Error::config(
                    "register_periodic",
                    format!("periodic {}: {}", self.name, e.message()),
                )
            })
    }
}

/// A parsed five-field cron expression: the allowed values of each field as bits.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    days_star: bool,
    weekdays_star: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    fn parse(text: &str) -> std::result::Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [m, h, dom, mon, dow] = fields[..] else {
            return Err(format!("expected 5 fields, got {}", fields.len()));
        };
        let weekdays = field(dow, 0, 7, &WEEKDAYS, 0)?;
        // 7 is Sunday too
        let weekdays = (weekdays | (weekdays >> 7)) & 0x7f;
        Ok(Cron {
            minutes: field(m, 0, 59, &[], 0)?,
            hours: u32::try_from(field(h, 0, 23, &[], 0)?).map_err(|e| e.to_string())?,
            days: u32::try_from(field(dom, 1, 31, &[], 0)?).map_err(|e| e.to_string())?,
            months: u16::try_from(field(mon, 1, 12, &MONTHS, 1)?).map_err(|e| e.to_string())?,
            weekdays: u8::try_from(weekdays).map_err(|e| e.to_string())?,
            days_star: dom.starts_with('*'),
            weekdays_star: dow.starts_with('*'),
        })
    }

    fn day_matches(&self, t: NaiveDateTime) -> bool {
        let dom = self.days & (1 << t.day()) != 0;
        let dow = self.weekdays & (1 << t.weekday().num_days_from_sunday()) != 0;
        match (self.days_star, self.weekdays_star) {
            (true, true) => true,
            (false, true) => dom,
            (true, false) => dow,
            (false, false) => dom || dow,
        }
    }

    /// The first tick strictly after `t`: the first matching wall-clock minute of `zone`
    /// whose [`instant`] is later than `t`. Instants grow with wall-clock minutes (a
    /// repeated hour maps to its first pass, a skipped one to the jump), so the walk
    /// starts at `t`'s wall-clock minute and passes the few that map to `t` or before.
    fn after(&self, t: DateTime<Utc>, zone: Tz) -> DateTime<Utc> {
        let mut c = minute_of(t.with_timezone(&zone).naive_local());
        for _ in 0..WALK {
            let Some(m) = self.search(c, 1) else {
                break;
            };
            let at = instant(zone, m);
            if at > t {
                return at;
            }
            c = m + ChronoDuration::minutes(1);
        }
        DateTime::<Utc>::MAX_UTC
    }

    /// The last tick at or before `t`. In the second pass of a repeated hour, the last
    /// tick fired is in the first pass, at a later wall-clock time than `t`'s: the walk
    /// back starts `FOLD` ahead of `t`'s wall clock.
    fn at_or_before(&self, t: DateTime<Utc>, zone: Tz) -> DateTime<Utc> {
        let mut c = minute_of(t.with_timezone(&zone).naive_local());
        if zone != Tz::UTC {
            c += FOLD;
        }
        for _ in 0..WALK {
            let Some(m) = self.search(c, -1) else {
                break;
            };
            let at = instant(zone, m);
            if at <= t {
                return at;
            }
            c = m - ChronoDuration::minutes(1);
        }
        DateTime::<Utc>::MIN_UTC
    }

    /// From wall-clock minute `t`, the first match going forward (`dir` 1) or backward
    /// (-1), skipping whole months, days and hours that cannot match. Bounded: an
    /// expression that never matches (31 February) gives up after 8 years.
    fn search(&self, mut t: NaiveDateTime, dir: i64) -> Option<NaiveDateTime> {
        let limit = t + ChronoDuration::days(8 * 366 * dir);
        while (dir > 0 && t < limit) || (dir < 0 && t > limit) {
            if self.months & (1 << t.month()) == 0 {
                t = if dir > 0 {
                    first_of_next_month(t)?
                } else {
                    first_of_month(t)? - ChronoDuration::minutes(1)
                };
                continue;
            }
            if !self.day_matches(t) {
                t = if dir > 0 {
                    start_of_day(t) + ChronoDuration::days(1)
                } else {
                    start_of_day(t) - ChronoDuration::minutes(1)
                };
                continue;
            }
            if self.hours & (1 << t.hour()) == 0 {
                let hour = start_of_day(t) + ChronoDuration::hours(i64::from(t.hour()));
                t = if dir > 0 {
                    hour + ChronoDuration::hours(1)
                } else {
                    hour - ChronoDuration::minutes(1)
                };
                continue;
            }
            if self.minutes & (1 << t.minute()) == 0 {
                t += ChronoDuration::minutes(dir);
                continue;
            }
            return Some(t);
        }
        None
    }
}

/// At most how many matching minutes a walk passes over (those of a repeated hour, or
/// of the `FOLD` ahead): past that the schedule is taken to have no tick.
const WALK: usize = 4 * 24 * 60;

/// How far ahead of `t`'s wall clock the walk back starts: longer than any repeated
/// stretch of wall-clock time (2 h at most in the zone database).
const FOLD: ChronoDuration = ChronoDuration::hours(3);

/// The instant a wall-clock minute `c` of `zone` fires at: itself; the first of its two
/// instants in a repeated hour; in a skipped stretch, the moment of the jump (the first
/// wall-clock minute after it that exists).
fn instant(zone: Tz, c: NaiveDateTime) -> DateTime<Utc> {
    let mut x = c;
    // a skipped stretch is at most a day long (Samoa, 2011)
    for _ in 0..=(2 * 24 * 60) {
        match zone.from_local_datetime(&x) {
            LocalResult::Single(at) | LocalResult::Ambiguous(at, _) => {
                return at.with_timezone(&Utc)
            }
            LocalResult::None => x += ChronoDuration::minutes(1),
        }
    }
    c.and_utc()
}

/// `t` to its whole minute.
fn minute_of(t: NaiveDateTime) -> NaiveDateTime {
    t.with_second(0)
        .and_then(|x| x.with_nanosecond(0))
        .unwrap_or(t)
}

fn start_of_day(t: NaiveDateTime) -> NaiveDateTime {
    t.date().and_time(chrono::NaiveTime::MIN)
}

fn first_of_month(t: NaiveDateTime) -> Option<NaiveDateTime> {
    Some(NaiveDate::from_ymd_opt(t.year(), t.month(), 1)?.and_time(chrono::NaiveTime::MIN))
}

fn first_of_next_month(t: NaiveDateTime) -> Option<NaiveDateTime> {
    let (y, m) = if t.month() == 12 {
        (t.year() + 1, 1)
    } else {
        (t.year(), t.month() + 1)
    };
    Some(NaiveDate::from_ymd_opt(y, m, 1)?.and_time(chrono::NaiveTime::MIN))
}

/// The bits of one cron field: values `lo..=hi` (names for them from `offset`).
fn field(
    text: &str,
    lo: u32,
    hi: u32,
    names: &[&str],
    offset: u32,
) -> std::result::Result<u64, String> {
    let value = |s: &str| -> std::result::Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as u32 + offset);
        }
        let v: u32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
        if v < lo || v > hi {
            return Err(format!("{v} is outside {lo}-{hi}"));
        }
        Ok(v)
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| format!("bad step {s:?}"))?;
                if step == 0 {
                    return Err("a step of 0".to_owned());
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (from, to) = match range {
            "*" => (lo, hi),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if step > 1 => (value(r)?, hi),
                None => {
                    let v = value(r)?;
                    (v, v)
                }
            },
        };
        if from > to {
            return Err(format!("range {from}-{to} runs backwards"));
        }
        let mut v = from;
        while v <= to {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn cron_next_and_previous_ticks() {
        let s = Schedule::cron("*/15 9-17 * * mon-fri").unwrap();
        // Tuesday 2026-12-01 17:50 → Wednesday 09:00
        assert_eq!(s.after(at(2026, 12, 1, 17, 50)), at(2026, 12, 2, 9, 0));
        assert_eq!(s.after(at(2026, 12, 1, 9, 0)), at(2026, 12, 1, 9, 15));
        // Saturday → Monday
        assert_eq!(s.after(at(2026, 12, 5, 10, 0)), at(2026, 12, 7, 9, 0));
        assert_eq!(
            s.at_or_before(at(2026, 12, 7, 8, 0)),
            at(2026, 12, 4, 17, 45)
        );
        assert_eq!(
            s.at_or_before(at(2026, 12, 1, 9, 30)),
            at(2026, 12, 1, 9, 30)
        );
        let monthly = Schedule::cron("@monthly").unwrap();
        assert_eq!(monthly.after(at(2026, 12, 1, 0, 0)), at(2027, 1, 1, 0, 0));
        // both day fields restricted: either matches
        let either = Schedule::cron("0 0 13 * fri").unwrap();
        assert_eq!(either.after(at(2026, 12, 1, 0, 0)), at(2026, 12, 4, 0, 0));
        assert_eq!(either.after(at(2026, 12, 11, 0, 0)), at(2026, 12, 13, 0, 0));
        // 7 is Sunday; names in any case
        assert_eq!(
            Schedule::cron("0 12 * DEC 7")
                .unwrap()
                .after(at(2026, 12, 1, 0, 0)),
            at(2026, 12, 6, 12, 0)
        );
        // leap day
        assert_eq!(
            Schedule::cron("0 0 29 2 *")
                .unwrap()
                .after(at(2026, 3, 1, 0, 0)),
            at(2028, 2, 29, 0, 0)
        );
    }

    /// The ticks of `s` from `from` on, `n` of them.
    fn ticks(s: &Schedule, from: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut t = from;
        (0..n)
            .map(|_| {
                t = s.after(t);
                t
            })
            .collect()
    }

    #[test]
    fn cron_in_a_zone_follows_its_wall_clock() {
        let paris = Schedule::cron("0 9 * * mon-fri")
            .unwrap()
            .in_zone("Europe/Paris")
            .unwrap();
        // CET (UTC+1) in December, CEST (UTC+2) in July
        assert_eq!(paris.after(at(2026, 12, 1, 12, 0)), at(2026, 12, 2, 8, 0));
        assert_eq!(paris.after(at(2026, 7, 1, 12, 0)), at(2026, 7, 2, 7, 0));
        assert_eq!(
            paris.at_or_before(at(2026, 12, 2, 8, 0)),
            at(2026, 12, 2, 8, 0)
        );
        assert_eq!(paris.zone(), Some("Europe/Paris"));
        assert_eq!(
            format!("{paris:?}"),
            r#"Schedule::cron("0 9 * * mon-fri").in_zone("Europe/Paris")"#
        );
        assert_eq!(Schedule::cron("@daily").unwrap().zone(), Some("UTC"));
        // Kathmandu is UTC+5:45: minutes of the offset count
        let ktm = Schedule::cron("0 0 * * *")
            .unwrap()
            .in_zone("Asia/Kathmandu")
            .unwrap();
        assert_eq!(ktm.after(at(2026, 12, 1, 12, 0)), at(2026, 12, 1, 18, 15));
    }

    #[test]
    fn a_skipped_hour_fires_once_at_the_jump() {
        // New York springs forward on 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC)
        let ny = |e: &str| {
            Schedule::cron(e)
                .unwrap()
                .in_zone("America/New_York")
                .unwrap()
        };
        let daily = ny("30 2 * * *");
        assert_eq!(
            ticks(&daily, at(2026, 3, 6, 12, 0), 3),
            vec![
                at(2026, 3, 7, 7, 30), // 02:30 EST
                at(2026, 3, 8, 7, 0),  // 02:30 does not exist: 03:00 EDT
                at(2026, 3, 9, 6, 30), // 02:30 EDT
            ]
        );
        assert_eq!(
            daily.at_or_before(at(2026, 3, 8, 7, 10)),
            at(2026, 3, 8, 7, 0)
        );
        assert_eq!(
            daily.at_or_before(at(2026, 3, 8, 6, 59)),
            at(2026, 3, 7, 7, 30)
        );
        // every half hour: 02:00 and 02:30 are one tick, the jump, which is 03:00's too
        let half = ny("*/30 * * * *");
        assert_eq!(
            ticks(&half, at(2026, 3, 8, 5, 45), 4),
            vec![
                at(2026, 3, 8, 6, 0),  // 01:00 EST
                at(2026, 3, 8, 6, 30), // 01:30 EST
                at(2026, 3, 8, 7, 0),  // 02:00, 02:30 (skipped) and 03:00 EDT
                at(2026, 3, 8, 7, 30), // 03:30 EDT
            ]
        );
    }

    #[test]
    fn a_repeated_hour_fires_once_at_its_first_pass() {
        // New York falls back on 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00 UTC);
        // 01:00-01:59 comes twice, at 05:00-05:59 UTC (EDT) and 06:00-06:59 UTC (EST)
        let ny = |e: &str| {
            Schedule::cron(e)
                .unwrap()
                .in_zone("America/New_York")
                .unwrap()
        };
        let daily = ny("30 1 * * *");
        assert_eq!(
            ticks(&daily, at(2026, 10, 31, 12, 0), 2),
            vec![at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)]
        );
        // in the second pass, the last tick is the first pass's
        assert_eq!(
            daily.at_or_before(at(2026, 11, 1, 6, 45)),
            at(2026, 11, 1, 5, 30)
        );
        assert_eq!(daily.after(at(2026, 11, 1, 6, 10)), at(2026, 11, 2, 6, 30));
        let half = ny("*/30 * * * *");
        assert_eq!(
            ticks(&half, at(2026, 11, 1, 4, 15), 5),
            vec![
                at(2026, 11, 1, 4, 30), // 00:30 EDT
                at(2026, 11, 1, 5, 0),  // 01:00 EDT
                at(2026, 11, 1, 5, 30), // 01:30 EDT; not again at 01:00 and 01:30 EST
                at(2026, 11, 1, 7, 0),  // 02:00 EST
                at(2026, 11, 1, 7, 30),
            ]
        );
        // the second pass's wall clock (01:10 EST) has the first pass's last tick behind
        assert_eq!(
            half.at_or_before(at(2026, 11, 1, 6, 10)),
            at(2026, 11, 1, 5, 30)
        );
        assert_eq!(half.after(at(2026, 11, 1, 6, 10)), at(2026, 11, 1, 7, 0));
    }

    #[test]
    fn bad_zones_are_refused() {
        for bad in ["Mars/Olympus", "", "europe/paris", "UTC+1"] {
            let e = Schedule::cron("0 3 * * *")
                .unwrap()
                .in_zone(bad)
                .unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains("time zone"), "{e}");
        }
        let e = Schedule::every(Duration::from_secs(60))
            .unwrap()
            .in_zone("Europe/Paris")
            .unwrap_err();
        assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("time zone"), "{e}");
    }

    #[test]
    fn bad_cron_expressions_are_refused() {
        for bad in [
            "",
            "* * * *",
            "60 * * * *",
            "* 24 * * *",
            "* * 0 * *",
            "*/0 * * * *",
            "5-1 * * * *",
            "x * * * *",
            "* * * foo *",
        ] {
            let e = Schedule::cron(bad).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidInput, "{bad}");
        }
        assert!(Schedule::every(Duration::from_millis(50)).is_err());
    }

    #[test]
    fn intervals_tick_on_multiples_since_the_epoch() {
        let s = Schedule::every(Duration::from_secs(3600)).unwrap();
        assert_eq!(s.after(at(2026, 12, 1, 10, 30)), at(2026, 12, 1, 11, 0));
        assert_eq!(s.after(at(2026, 12, 1, 11, 0)), at(2026, 12, 1, 12, 0));
        assert_eq!(
            s.at_or_before(at(2026, 12, 1, 11, 0)),
            at(2026, 12, 1, 11, 0)
        );
    }
}
