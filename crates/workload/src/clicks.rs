//! Click logs with a known sessionization, for the click-log sessionization
//! MapReduce benchmark.
//!
//! A click is `(user, timestamp_ms, url)`. A user's clicks form sessions: a
//! click starts a new session when it comes more than `session_timeout_ms`
//! after the same user's previous click (or is the user's first). The
//! generator builds its data so that every gap inside a planned session is at
//! most the timeout and every gap between sessions is more than the timeout,
//! and counts the sessions it emits: [`ClickSummary::sessions`] is exactly
//! what a correct sessionization of the output finds.
//!
//! # Algorithm (an event simulation, output in time order)
//! 1. Session arrivals form a Poisson process over the whole site: the arrival
//!    clock starts at 0 and advances by `Exp(session_arrival_gap_ms_mean)`
//!    (kept in `f64`; the arrival's timestamp is
//!    `start_timestamp_ms + floor(clock)`).
//! 2. At an arrival at time `T`, draw the user (Zipf over `users` ranks with
//!    `user_zipf_exponent`, rank `r` becomes user id `r - 1`, or
//!    `permutation(r - 1)` when `scramble_users`) and a click count `k`
//!    (geometric on 1, 2, ... with mean `clicks_per_session_mean`:
//!    `k = 1 + floor(ln(1 - u) / ln(1 - 1/mean))`). Then:
//!    - user never seen, or idle since more than the timeout
//!      (`T - last_click > timeout`): a new session; its first click is at `T`;
//!    - user idle for at most the timeout: the arrival continues the user's
//!      last session, next click at `T` (a sessionizer joins them anyway);
//!    - user in a session: the session gets `k` more clicks (a heavy user
//!      whose arrivals come faster than they click has one long session).
//! 3. A heap orders the users' next clicks by (time, insertion sequence).
//!    Before each arrival, every pending click earlier than it is emitted;
//!    emitting draws the URL (Zipf over `urls` with `url_zipf_exponent`,
//!    index `rank - 1`) and, if the session has clicks left, schedules the
//!    next one `floor(g)` ms later, `g` exponential with mean
//!    `click_gap_ms_mean` truncated to `[0, timeout]` by inversion:
//!    `g = -mean * ln(1 - u (1 - e^(-timeout / mean)))`.
//! 4. Stop after `clicks` clicks. Timestamps are non-decreasing: arrivals
//!    only move forward and every scheduled click is at or after the click
//!    that scheduled it.
//!
//! Timestamps are `u64` milliseconds and all sums are checked:
//! [`ClickParams::validate`] keeps `start_timestamp_ms` at most
//! [`START_TIMESTAMP_MS_MAX`] (2^62), which leaves 2^63 ms (292 million
//! years) for the log; a log that still runs past `u64::MAX` (absurd gaps or
//! timeouts) ends with an error instead of wrapping around.
//!
//! All draws come from one stream, [`Rng::stream`]`(seed, 0)`, in the order
//! the simulation makes them; the user permutation is seeded with
//! `derive_seed(seed, 1)`.
//!
//! Output: text lines `user\ttimestamp_ms\turl\n`, user and timestamp in
//! decimal, the URL a path of the form `/<section>/<page>` (see
//! [`ClickGenerator::url`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;

use serde::Serialize;
use spillway_core::decimal::push_decimal;
use spillway_core::{ensure, Error, Result};

use crate::permutation::Permutation;
use crate::rng::{derive_seed, Rng};
use crate::sink::ChunkedSink;
use crate::text::{Vocabulary, VOCABULARY_WORDS_MAX};
use crate::zipf::{Zipf, ZIPF_RANKS_MAX};
use crate::DEFAULT_SEED;

/// Sections URLs are spread over (the first path segment).
pub const URL_SECTIONS: u64 = 16;
/// The largest URL set (URL names come from the text vocabulary).
pub const URLS_MAX: u64 = VOCABULARY_WORDS_MAX - URL_SECTIONS;
/// The largest `start_timestamp_ms`: 2^62 leaves 2^63 ms (292 million years)
/// of `u64` room for the log itself.
pub const START_TIMESTAMP_MS_MAX: u64 = 1 << 62;

const EVENT_STREAM: u64 = 0;
const PERMUTATION_STREAM: u64 = 1;

/// Everything that determines a click log.
#[derive(Debug, Clone, PartialEq)]
pub struct ClickParams {
    /// Users ids are drawn from: `0..users`, 1..=2^53 (default 100 000).
    pub users: u64,
    /// Clicks to generate (default 10^6).
    pub clicks: u64,
    /// Zipf exponent of session arrivals over users (default 1.0).
    pub user_zipf_exponent: f64,
    /// Scatter the hot users over the id space (default true).
    pub scramble_users: bool,
    /// Distinct URLs (default 10 000).
    pub urls: u64,
    /// Zipf exponent over URLs (default 1.0).
    pub url_zipf_exponent: f64,
    /// Mean clicks a session arrival brings, >= 1 (default 8).
    pub clicks_per_session_mean: f64,
    /// Mean gap between a session's clicks before truncation to the timeout
    /// (default 20 000 ms).
    pub click_gap_ms_mean: f64,
    /// Inactivity that ends a session (default 30 minutes).
    pub session_timeout_ms: u64,
    /// Mean gap between session arrivals over the whole site (default 100 ms).
    pub session_arrival_gap_ms_mean: f64,
    /// Timestamp of the first arrival, at most [`START_TIMESTAMP_MS_MAX`]
    /// (default 1 600 000 000 000, September 2020).
    pub start_timestamp_ms: u64,
    /// The seed all draws derive from.
    pub seed: u64,
}

impl Default for ClickParams {
    fn default() -> Self {
        ClickParams {
            users: 100_000,
            clicks: 1_000_000,
            user_zipf_exponent: 1.0,
            scramble_users: true,
            urls: 10_000,
            url_zipf_exponent: 1.0,
            clicks_per_session_mean: 8.0,
            click_gap_ms_mean: 20_000.0,
            session_timeout_ms: 30 * 60 * 1000,
            session_arrival_gap_ms_mean: 100.0,
            start_timestamp_ms: 1_600_000_000_000,
            seed: DEFAULT_SEED,
        }
    }
}

impl ClickParams {
    /// Checks every parameter; errors name the parameter and its value.
    /// [`ClickGenerator::new`] fails only where this does.
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.users >= 1,
            InvalidArgument,
            "users must be at least 1, got 0"
        );
        ensure!(
            self.users <= ZIPF_RANKS_MAX,
            InvalidArgument,
            "users must be at most 2^53, got {}",
            self.users
        );
        ensure!(
            (1..=URLS_MAX).contains(&self.urls),
            InvalidArgument,
            "urls must be in 1..={URLS_MAX}, got {}",
            self.urls
        );
        for (name, exponent) in [
            ("user_zipf_exponent", self.user_zipf_exponent),
            ("url_zipf_exponent", self.url_zipf_exponent),
        ] {
            ensure!(
                exponent.is_finite() && exponent > 0.0,
                InvalidArgument,
                "{name} must be > 0, got {exponent}"
            );
        }
        ensure!(
            self.clicks_per_session_mean.is_finite() && self.clicks_per_session_mean >= 1.0,
            InvalidArgument,
            "clicks_per_session_mean must be >= 1, got {}",
            self.clicks_per_session_mean
        );
        for (name, mean) in [
            ("click_gap_ms_mean", self.click_gap_ms_mean),
            ("session_arrival_gap_ms_mean", self.session_arrival_gap_ms_mean),
        ] {
            ensure!(
                mean.is_finite() && mean > 0.0,
                InvalidArgument,
                "{name} must be > 0, got {mean}"
            );
        }
        ensure!(
            self.session_timeout_ms >= 1,
            InvalidArgument,
            "session_timeout_ms must be at least 1, got 0"
        );
        ensure!(
            self.start_timestamp_ms <= START_TIMESTAMP_MS_MAX,
            InvalidArgument,
            "start_timestamp_ms must be at most 2^62 = {START_TIMESTAMP_MS_MAX} (room for the log's \
             timestamps), got {}",
            self.start_timestamp_ms
        );
        Ok(())
    }
}

/// One click.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Click {
    /// The user id, in `0..users`.
    pub user: u64,
    /// Milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The URL's index in `0..urls`; its path is [`ClickGenerator::url`].
    pub url_index: u64,
}

/// What [`write_clicks`] produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ClickSummary {
    /// Clicks written.
    pub records: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Sessions in the output under the rule "a gap over
    /// `session_timeout_ms` starts a session": the answer sessionization must
    /// reproduce.
    pub sessions: u64,
    /// Users with at least one click.
    pub distinct_users: u64,
    /// The first timestamp (0 when no clicks).
    pub timestamp_ms_first: u64,
    /// The last timestamp (0 when no clicks).
    pub timestamp_ms_last: u64,
}

/// Hashes a user id with one 64x64->128-bit multiplication by an odd
/// constant, folding the high half into the low one: every input bit reaches
/// the low bits (the bucket index) and the top bits (the hash table's tag).
/// The per-click lookup is the simulation's hot path, and SipHash's
/// flooding resistance buys nothing for ids the generator draws itself; the
/// hash values are never persisted and never change the output.
#[derive(Debug, Clone, Copy, Default)]
struct UserIdHasher {
    hash: u64,
}

impl UserIdHasher {
    const MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;
}

impl Hasher for UserIdHasher {
    fn finish(&self) -> u64 {
        self.hash
    }

    #[inline]
    fn write_u64(&mut self, value: u64) {
        let product = u128::from(value ^ self.hash) * u128::from(Self::MULTIPLIER);
        self.hash = (product as u64) ^ ((product >> 64) as u64);
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used for u64 keys; here for completeness.
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
}

/// The per-user state of the simulation, keyed by user id.
type UserStates = HashMap<u64, UserState, BuildHasherDefault<UserIdHasher>>;

#[derive(Debug, Clone)]
struct UserState {
    /// The user's latest emitted or scheduled click time.
    last_click_ms: u64,
    /// Clicks left in the current session, including a scheduled one.
    remaining: u64,
    /// A click of this user is in the heap.
    active: bool,
    /// The next emitted click of this user starts a session.
    starts_session: bool,
    /// At least one click of this user was emitted.
    has_clicked: bool,
}

/// The click stream of a [`ClickParams`], as an iterator in time order.
#[derive(Debug, Clone)]
pub struct ClickGenerator {
    params: ClickParams,
    rng: Rng,
    user_zipf: Zipf,
    user_permutation: Option<Permutation>,
    url_zipf: Zipf,
    url_bytes: Vec<u8>,
    url_offsets: Vec<u32>,
    /// `1 - e^(-timeout / click_gap_mean)`: the CDF mass the truncated gap
    /// distribution keeps.
    gap_mass: f64,
    /// `ln(1 - 1 / clicks_per_session_mean)`, or 0 for single-click sessions.
    session_log_continue: f64,
    arrival_clock_ms: f64,
    users: UserStates,
    pending: BinaryHeap<Reverse<(u64, u64, u64)>>,
    sequence: u64,
    emitted: u64,
    sessions: u64,
    distinct_users: u64,
    /// A timestamp passed `u64::MAX`; the generator yields nothing more.
    overflowed: bool,
}

impl ClickGenerator {
    /// A generator for `params`; builds the URL table. Fails only when
    /// [`ClickParams::validate`] does.
    pub fn new(params: &ClickParams) -> Result<Self> {
        params.validate()?;
        let words = Vocabulary::new(URL_SECTIONS + params.urls)?;
        let mut url_bytes = Vec::new();
        let mut url_offsets = vec![0u32];
        for index in 0..params.urls as usize {
            url_bytes.push(b'/');
            url_bytes.extend_from_slice(words.word(index % URL_SECTIONS as usize));
            url_bytes.push(b'/');
            url_bytes.extend_from_slice(words.word(URL_SECTIONS as usize + index));
            url_offsets.push(url_bytes.len() as u32);
        }
        let continue_probability = 1.0 - 1.0 / params.clicks_per_session_mean;
        Ok(ClickGenerator {
            rng: Rng::stream(params.seed, EVENT_STREAM),
            user_zipf: Zipf::new(params.users, params.user_zipf_exponent)?,
            user_permutation: if params.scramble_users {
                Some(Permutation::new(
                    params.users,
                    derive_seed(params.seed, PERMUTATION_STREAM),
                )?)
            } else {
                None
            },
            url_zipf: Zipf::new(params.urls, params.url_zipf_exponent)?,
            url_bytes,
            url_offsets,
            gap_mass: -(-(params.session_timeout_ms as f64) / params.click_gap_ms_mean).exp_m1(),
            session_log_continue: if continue_probability > 0.0 {
                continue_probability.ln()
            } else {
                0.0
            },
            arrival_clock_ms: 0.0,
            users: UserStates::default(),
            pending: BinaryHeap::new(),
            sequence: 0,
            emitted: 0,
            sessions: 0,
            distinct_users: 0,
            overflowed: false,
            params: params.clone(),
        })
    }

    /// The path of URL `index`: `/<section>/<page>`, where section is
    /// vocabulary word `index mod 16` and page is vocabulary word
    /// `16 + index` (so paths are distinct).
    pub fn url(&self, index: u64) -> &str {
        std::str::from_utf8(self.url_bytes(index)).expect("URLs are ASCII")
    }

    /// The path of URL `index` as bytes (ASCII): [`ClickGenerator::url`]
    /// without the UTF-8 check, for writers.
    #[inline]
    pub fn url_bytes(&self, index: u64) -> &[u8] {
        let index = index as usize;
        &self.url_bytes[self.url_offsets[index] as usize..self.url_offsets[index + 1] as usize]
    }

    /// Sessions among the clicks emitted so far.
    pub fn sessions(&self) -> u64 {
        self.sessions
    }

    /// Users among the clicks emitted so far.
    pub fn distinct_users(&self) -> u64 {
        self.distinct_users
    }

    /// The timestamp of the next session arrival; `None` when it is past
    /// `u64::MAX`.
    fn arrival_ms(&self) -> Option<u64> {
        // 2^64 as f64: `as u64` would saturate at and above it.
        const CLOCK_MS_LIMIT: f64 = 18_446_744_073_709_551_616.0;
        if self.arrival_clock_ms < CLOCK_MS_LIMIT {
            self.params
                .start_timestamp_ms
                .checked_add(self.arrival_clock_ms as u64)
        } else {
            None
        }
    }

    /// The error of a log whose timestamps run past `u64::MAX`; marks the
    /// generator finished.
    fn overflow(&mut self) -> Error {
        self.overflowed = true;
        Error::InvalidArgument(format!(
            "click timestamps pass 2^64 ms after {} clicks: start_timestamp_ms {} plus the span of the \
             log does not fit (lower session_arrival_gap_ms_mean, click_gap_ms_mean or \
             session_timeout_ms)",
            self.emitted, self.params.start_timestamp_ms
        ))
    }

    fn schedule(&mut self, time_ms: u64, user: u64) {
        self.pending.push(Reverse((time_ms, self.sequence, user)));
        self.sequence += 1;
    }

    /// Step 2 of the algorithm: one session arrival at `now`.
    fn arrive(&mut self, now: u64) {
        self.arrival_clock_ms += self.rng.next_exponential(self.params.session_arrival_gap_ms_mean);
        let rank = self.user_zipf.sample(&mut self.rng);
        let user = match &self.user_permutation {
            Some(permutation) => permutation.apply(rank - 1),
            None => rank - 1,
        };
        let clicks = if self.session_log_continue < 0.0 {
            let u = self.rng.next_f64();
            // Saturates (rather than overflows) for absurd means.
            (((1.0 - u).ln() / self.session_log_continue) as u64).saturating_add(1)
        } else {
            1
        };
        let timeout = self.params.session_timeout_ms;
        let schedule = match self.users.get_mut(&user) {
            None => {
                self.users.insert(
                    user,
                    UserState {
                        last_click_ms: now,
                        remaining: clicks,
                        active: true,
                        starts_session: true,
                        has_clicked: false,
                    },
                );
                true
            }
            Some(state) if state.active => {
                state.remaining = state.remaining.saturating_add(clicks);
                false
            }
            Some(state) => {
                state.starts_session = now - state.last_click_ms > timeout;
                state.last_click_ms = now;
                state.remaining = clicks;
                state.active = true;
                true
            }
        };
        if schedule {
            self.schedule(now, user);
        }
    }

    /// Step 3: emit the earliest pending click.
    fn emit(&mut self) -> Result<Click> {
        let Reverse((time_ms, _, user)) = self.pending.pop().expect("emit is called with a pending click");
        let url_index = self.url_zipf.sample(&mut self.rng) - 1;
        let state = self.users.get_mut(&user).expect("scheduled users have a state");
        if state.starts_session {
            state.starts_session = false;
            self.sessions += 1;
        }
        if !state.has_clicked {
            state.has_clicked = true;
            self.distinct_users += 1;
        }
        state.remaining -= 1;
        let next = if state.remaining > 0 {
            let u = self.rng.next_f64();
            let gap = -self.params.click_gap_ms_mean * (-u * self.gap_mass).ln_1p();
            let Some(next) = time_ms.checked_add((gap as u64).min(self.params.session_timeout_ms)) else {
                return Err(self.overflow());
            };
            state.last_click_ms = next;
            Some(next)
        } else {
            state.active = false;
            None
        };
        if let Some(next) = next {
            self.schedule(next, user);
        }
        self.emitted += 1;
        Ok(Click {
            user,
            timestamp_ms: time_ms,
            url_index,
        })
    }

    /// The next click; `Ok(None)` after `clicks` clicks. Fails (and yields
    /// nothing after) when a timestamp would pass `u64::MAX`, which
    /// parameters that pass [`ClickParams::validate`] reach only when the log
    /// spans more than 2^63 ms.
    pub fn try_next(&mut self) -> Result<Option<Click>> {
        if self.overflowed {
            return Err(self.overflow());
        }
        if self.emitted == self.params.clicks {
            return Ok(None);
        }
        loop {
            // An arrival past u64::MAX comes after every pending click.
            let arrival_ms = self.arrival_ms();
            match (self.pending.peek(), arrival_ms) {
                (Some(Reverse((time_ms, _, _))), Some(arrival_ms)) if *time_ms < arrival_ms => {
                    return self.emit().map(Some)
                }
                (Some(_), None) => return self.emit().map(Some),
                (_, Some(arrival_ms)) => self.arrive(arrival_ms),
                (None, None) => return Err(self.overflow()),
            }
        }
    }
}

/// The clicks in time order. The iterator ends early only where
/// [`ClickGenerator::try_next`] fails (timestamps past `u64::MAX`); use that
/// to see the error.
impl Iterator for ClickGenerator {
    type Item = Click;

    fn next(&mut self) -> Option<Click> {
        self.try_next().ok().flatten()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let remaining = usize::try_from(self.params.clicks - self.emitted).unwrap_or(usize::MAX);
        (0, Some(remaining))
    }
}

/// Writes the click log of `params` to `writer` as `user\ttimestamp_ms\turl\n`
/// lines (in chunks of about 1 MiB) and returns what was written, including
/// the true session count.
pub fn write_clicks(params: &ClickParams, writer: impl Write) -> Result<ClickSummary> {
    let mut generator = ClickGenerator::new(params)?;
    let mut sink = ChunkedSink::new(writer, "click log");
    let mut summary = ClickSummary::default();
    while let Some(click) = generator.try_next()? {
        if summary.records == 0 {
            summary.timestamp_ms_first = click.timestamp_ms;
        }
        summary.timestamp_ms_last = click.timestamp_ms;
        summary.records += 1;
        let url = generator.url_bytes(click.url_index);
        let buffer = sink.buffer();
        push_decimal(buffer, click.user);
        buffer.push(b'\t');
        push_decimal(buffer, click.timestamp_ms);
        buffer.push(b'\t');
        buffer.extend_from_slice(url);
        buffer.push(b'\n');
        sink.maybe_flush()?;
    }
    summary.bytes = sink.finish()?;
    summary.sessions = generator.sessions();
    summary.distinct_users = generator.distinct_users();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;

    fn generate(params: &ClickParams) -> (Vec<u8>, ClickSummary) {
        let mut output = Vec::new();
        let summary = write_clicks(params, &mut output).unwrap();
        (output, summary)
    }

    fn parse(output: &[u8]) -> Vec<(u64, u64, String)> {
        std::str::from_utf8(output)
            .unwrap()
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split('\t').collect();
                assert_eq!(fields.len(), 3, "{line}");
                (
                    fields[0].parse().unwrap(),
                    fields[1].parse().unwrap(),
                    fields[2].to_string(),
                )
            })
            .collect()
    }

    /// An independent sessionization: per user, a click more than `timeout`
    /// after that user's previous click (or the first) starts a session.
    fn sessionize(clicks: &[(u64, u64, String)], timeout: u64) -> u64 {
        let mut last: HashMap<u64, u64> = HashMap::new();
        let mut sessions = 0;
        for (user, timestamp, _) in clicks {
            match last.insert(*user, *timestamp) {
                Some(previous) if timestamp - previous <= timeout => {}
                _ => sessions += 1,
            }
        }
        sessions
    }

    fn calm_site() -> ClickParams {
        // One session arrival per minute over 1000 users: no user's arrivals
        // outpace their clicking.
        ClickParams {
            users: 1000,
            clicks: 50_000,
            session_arrival_gap_ms_mean: 60_000.0,
            session_timeout_ms: 10 * 60 * 1000,
            ..ClickParams::default()
        }
    }

    #[test]
    fn session_truth_matches_an_independent_sessionization() {
        // Ten arrivals a second: the hottest users' arrivals outpace their
        // clicking and they stay in one long session.
        let busy_site = ClickParams {
            users: 2000,
            clicks: 50_000,
            session_timeout_ms: 60_000,
            click_gap_ms_mean: 10_000.0,
            seed: 3,
            ..ClickParams::default()
        };
        for params in [calm_site(), busy_site] {
            let (output, summary) = generate(&params);
            let clicks = parse(&output);
            assert_eq!(summary.records, 50_000);
            assert_eq!(clicks.len(), 50_000);
            assert_eq!(summary.bytes, output.len() as u64);
            assert!(
                clicks.windows(2).all(|pair| pair[0].1 <= pair[1].1),
                "timestamps decrease"
            );
            assert_eq!(summary.timestamp_ms_first, clicks[0].1);
            assert_eq!(summary.timestamp_ms_last, clicks[clicks.len() - 1].1);
            assert_eq!(summary.sessions, sessionize(&clicks, params.session_timeout_ms));
            let users: HashSet<u64> = clicks.iter().map(|click| click.0).collect();
            assert_eq!(summary.distinct_users, users.len() as u64);
            assert!(users.iter().all(|&user| user < params.users));
            // The answer is not trivial: users have several sessions, and
            // sessions several clicks.
            assert!(summary.sessions > summary.distinct_users, "{summary:?}");
            assert!(summary.sessions < summary.records / 3, "{summary:?}");
            // A different timeout gives a different answer, so the check
            // above depends on the session structure.
            assert_ne!(
                summary.sessions,
                sessionize(&clicks, params.session_timeout_ms / 10)
            );
        }
    }

    #[test]
    fn users_follow_zipf_and_click_gaps_the_requested_mean() {
        let params = ClickParams {
            scramble_users: false,
            ..calm_site()
        };
        let clicks = parse(&generate(&params).0);
        let mut per_user: HashMap<u64, u64> = HashMap::new();
        for click in &clicks {
            *per_user.entry(click.0).or_default() += 1;
        }
        // Rank 1 gets 1 / H(1000, 1) ~ 13.4% of the session arrivals.
        let top = per_user[&0] as f64 / clicks.len() as f64;
        assert!((0.10..0.17).contains(&top), "user 0 has {top:.3} of the clicks");
        let second = per_user[&1] as f64 / clicks.len() as f64;
        assert!(
            (top / second - 2.0).abs() < 0.5,
            "rank 1 / rank 2 = {}",
            top / second
        );
        // Gaps inside sessions: exponential with mean 20 s, median 20 ln 2 ~ 13.9 s
        // (continued sessions add a few longer gaps).
        let mut last: HashMap<u64, u64> = HashMap::new();
        let mut gaps: Vec<u64> = Vec::new();
        for (user, timestamp, _) in &clicks {
            if let Some(previous) = last.insert(*user, *timestamp) {
                if timestamp - previous <= params.session_timeout_ms {
                    gaps.push(timestamp - previous);
                }
            }
        }
        gaps.sort_unstable();
        let median = gaps[gaps.len() / 2];
        assert!((12_000..16_500).contains(&median), "median gap {median} ms");
    }

    #[test]
    fn same_seed_same_log_other_seed_other_log() {
        let params = ClickParams {
            clicks: 5_000,
            ..ClickParams::default()
        };
        let (first, first_summary) = generate(&params);
        let (second, second_summary) = generate(&params);
        assert!(first == second);
        assert_eq!(first_summary, second_summary);
        assert!(generate(&ClickParams { seed: 1, ..params }).0 != first);
    }

    #[test]
    fn urls_are_distinct_two_level_paths() {
        let generator = ClickGenerator::new(&ClickParams {
            urls: 500,
            ..ClickParams::default()
        })
        .unwrap();
        let urls: HashSet<&str> = (0..500).map(|index| generator.url(index)).collect();
        assert_eq!(urls.len(), 500);
        assert!((0..500).all(|index| generator.url_bytes(index) == generator.url(index).as_bytes()));
        for url in urls {
            let segments: Vec<&str> = url.split('/').collect();
            assert_eq!(segments.len(), 3, "{url}");
            assert!(segments[0].is_empty() && segments[1..].iter().all(|segment| !segment.is_empty()));
        }
    }

    #[test]
    fn validation_names_the_parameter_and_value() {
        let check = |params: ClickParams, wanted: &str| {
            let error = ClickGenerator::new(&params).unwrap_err().to_string();
            assert!(error.contains(wanted), "{error} does not contain {wanted}");
        };
        check(
            ClickParams {
                users: 0,
                ..ClickParams::default()
            },
            "users must be at least 1, got 0",
        );
        check(
            ClickParams {
                urls: 0,
                ..ClickParams::default()
            },
            "urls must be in",
        );
        check(
            ClickParams {
                user_zipf_exponent: -2.0,
                ..ClickParams::default()
            },
            "user_zipf_exponent must be > 0, got -2",
        );
        check(
            ClickParams {
                clicks_per_session_mean: 0.5,
                ..ClickParams::default()
            },
            "clicks_per_session_mean must be >= 1, got 0.5",
        );
        check(
            ClickParams {
                click_gap_ms_mean: 0.0,
                ..ClickParams::default()
            },
            "click_gap_ms_mean must be > 0, got 0",
        );
        check(
            ClickParams {
                session_timeout_ms: 0,
                ..ClickParams::default()
            },
            "session_timeout_ms must be at least 1, got 0",
        );
        check(
            ClickParams {
                users: 1 << 54,
                ..ClickParams::default()
            },
            "users must be at most 2^53",
        );
        // Used to overflow `start + clock` (a panic in debug builds, wrapped
        // and decreasing timestamps in release builds).
        check(
            ClickParams {
                start_timestamp_ms: u64::MAX - 10,
                ..ClickParams::default()
            },
            "start_timestamp_ms must be at most 2^62 = 4611686018427387904",
        );
        assert!(ClickParams {
            start_timestamp_ms: START_TIMESTAMP_MS_MAX + 1,
            ..ClickParams::default()
        }
        .validate()
        .is_err());
    }

    #[test]
    fn timestamps_from_the_largest_start_stay_ordered() {
        let params = ClickParams {
            start_timestamp_ms: START_TIMESTAMP_MS_MAX,
            ..calm_site()
        };
        let (output, summary) = generate(&params);
        let clicks = parse(&output);
        assert_eq!(clicks[0].1, START_TIMESTAMP_MS_MAX);
        assert!(clicks.windows(2).all(|pair| pair[0].1 <= pair[1].1));
        assert_eq!(summary.sessions, sessionize(&clicks, params.session_timeout_ms));
    }

    #[test]
    fn timestamps_past_u64_max_are_an_error_not_a_wrap() {
        // Arrivals 10^300 ms apart: the second arrival is past u64::MAX.
        let sparse_arrivals = ClickParams {
            users: 1,
            clicks: 10,
            clicks_per_session_mean: 1.0,
            session_arrival_gap_ms_mean: 1e300,
            start_timestamp_ms: START_TIMESTAMP_MS_MAX,
            ..ClickParams::default()
        };
        // Clicks up to 2^64 ms apart in the one long session of one user
        // (sessions of 10^16 clicks would also overflow a `+=` of counts).
        let long_gaps = ClickParams {
            users: 1,
            clicks: 1000,
            clicks_per_session_mean: 1e16,
            session_arrival_gap_ms_mean: 1e17,
            click_gap_ms_mean: 1e30,
            session_timeout_ms: u64::MAX,
            ..ClickParams::default()
        };
        for params in [sparse_arrivals, long_gaps] {
            let error = write_clicks(&params, std::io::sink()).unwrap_err();
            assert_eq!(error.kind(), spillway_core::ErrorKind::InvalidArgument);
            assert!(
                error.to_string().contains("click timestamps pass 2^64 ms"),
                "{error}"
            );
            let mut generator = ClickGenerator::new(&params).unwrap();
            let clicks: Vec<Click> = generator.by_ref().collect();
            assert!(!clicks.is_empty() && (clicks.len() as u64) < params.clicks);
            assert!(clicks
                .windows(2)
                .all(|pair| pair[0].timestamp_ms <= pair[1].timestamp_ms));
            assert!(generator.try_next().is_err(), "the error is sticky");
        }
    }

    /// FNV-1a of the output: a change to it changes every click data set.
    fn digest(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xCBF2_9CE4_8422_2325, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01B3)
        })
    }

    #[test]
    fn output_is_pinned() {
        // Pinned before the user-state map moved from SipHash to
        // `UserIdHasher`: hashing must never change the output.
        let cases = [
            (
                ClickParams {
                    clicks: 300_000,
                    ..ClickParams::default()
                },
                0x4E23_AD71_5FFE_4EC1,
            ),
            (
                ClickParams {
                    users: 1 << 40,
                    clicks: 100_000,
                    ..ClickParams::default()
                },
                0x1365_CBA5_91FC_2490,
            ),
            (
                ClickParams {
                    users: 1000,
                    clicks: 100_000,
                    scramble_users: false,
                    session_arrival_gap_ms_mean: 60_000.0,
                    ..ClickParams::default()
                },
                0xE114_0C4C_C5F8_4DF3,
            ),
        ];
        for (params, pinned) in cases {
            let (output, _) = generate(&params);
            assert_eq!(digest(&output), pinned, "{params:?}");
        }
    }

    #[test]
    fn zero_clicks_write_nothing() {
        let (output, summary) = generate(&ClickParams {
            clicks: 0,
            ..ClickParams::default()
        });
        assert!(output.is_empty());
        assert_eq!(summary, ClickSummary::default());
    }
}
