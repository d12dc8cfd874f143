//! The generator source: deterministic synthetic records, for demos, tests and benchmarks.
//!
//! Record `i` (its global index) is computed from `(seed, i)` alone, so the output does not
//! depend on the parallelism: subtask `s` of `p` emits the records `s, s + p, s + 2p, ...`,
//! and a position is just the next index.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weir_wire::Kind;

use super::{ConnectorError, Poll, Source, SourcePosition};
use crate::batch::{BATCH_BYTES, Batch};
use crate::clock::Clock;

const DEFAULT_WORDS_PER_LINE: u32 = 10;
const DEFAULT_VOCABULARY: u32 = 100_000;
/// The Zipf table holds one `f64` per word; this keeps it under 80 MB per subtask.
const MAX_VOCABULARY: u32 = 10_000_000;
/// The longest the generator asks to be left alone while rate limited, so that it stays
/// responsive.
const MAX_IDLE: Duration = Duration::from_millis(100);

/// `type = "generator"`: a deterministic, seeded stream of records.
///
/// ```toml
/// type = "generator"
/// mode = "words"      # lines of Zipf-distributed words
/// count = 1_000_000   # then the source finishes
/// rate = 50_000       # records per second, over all subtasks
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorConfig {
    /// The seed: the same seed gives the same records (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Records to emit over all subtasks before finishing; absent means unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Records per second over all subtasks; absent means as fast as possible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// What the records look like (default `"sequence"`).
    #[serde(default)]
    pub mode: GeneratorMode,
    /// Words per record in mode `"words"` (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words_per_line: Option<u32>,
    /// Distinct words in modes `"words"`, `"keyed_words"` and `"keyed_cycle"` (default
    /// 100000). In the first two, word ranks follow Zipf's law with exponent 1: the `r`-th
    /// most frequent word occurs about `1 / r` as often as the most frequent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocabulary: Option<u32>,
    /// Event times for the records (absent: records have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time: Option<EventTime>,
}

/// `event_time = { ... }` of a generator: record `i` (its global index) gets the timestamp
/// `start + i × interval − d`, with `d` drawn for each record from `0..=max_disorder`, so
/// the records are out of order by at most `max_disorder`, as the same seed always gives.
///
/// ```toml
/// event_time = { start = 1_700_000_000_000, interval = "10ms", max_disorder = "2s" }
/// ```
///
/// With `clock = true` the timestamps follow the job's processing-time clock instead: a
/// record's is the time it is generated less its `d`, so that a job's results can be timed
/// against their event time (the sinks' event-time lag). Such timestamps are not
/// reproducible: records generated again after a restore get new ones.
///
/// ```toml
/// event_time = { clock = true, max_disorder = "100ms" }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventTime {
    /// The timestamp of record 0, in milliseconds since the Unix epoch (default 0).
    #[serde(default)]
    pub start: i64,
    /// Between the timestamps of consecutive records before disorder (default 1 ms).
    #[serde(default = "one_ms", with = "humantime_serde")]
    pub interval: Duration,
    /// How much earlier than its place a record's timestamp may be (default 0: in order).
    #[serde(default, with = "humantime_serde")]
    pub max_disorder: Duration,
    /// Timestamps are the time each record is generated (the job's clock) less its disorder;
    /// `start` and `interval` do not apply (default false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub clock: bool,
}

fn one_ms() -> Duration {
    Duration::from_millis(1)
}

impl EventTime {
    /// The timestamp of record `i`, generated at `now` (ms), whose random stream (apart from
    /// the record's own) is `rng`.
    fn of(&self, i: u64, now: i64, rng: &mut SplitMix64) -> i64 {
        let place = match self.clock {
            true => now,
            false => self
                .start
                .saturating_add((i as i64).saturating_mul(self.interval.as_millis() as i64)),
        };
        let disorder = self.max_disorder.as_millis() as u64;
        let d = if disorder == 0 {
            0
        } else {
            rng.next_u64() % (disorder + 1)
        };
        place.saturating_sub(d as i64)
    }
}

/// The records a generator emits (with timestamps when `event_time` is set).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GeneratorMode {
    /// Value = the record's index in decimal (`0`, `1`, ...); no key.
    #[default]
    Sequence,
    /// Value = `words_per_line` words separated by spaces; no key.
    Words,
    /// One word per record; key = value = the word.
    KeyedWords,
    /// One word per record, key = value = the word of rank `index mod vocabulary`: every word
    /// once per round, so the keyed state of a job holds exactly `vocabulary` keys after one
    /// round (for benchmarks of state size).
    KeyedCycle,
}

impl GeneratorConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if let Some(e) = &self.event_time
            && e.clock
            && (e.start != 0 || e.interval != one_ms())
        {
            return Err(
                "event_time: start and interval do not apply with clock = true (the \
                 timestamps follow the clock); remove them, or remove clock"
                    .into(),
            );
        }
        if let Some(rate) = self.rate
            && !(rate > 0.0 && rate.is_finite())
        {
            return Err(format!(
                "rate = {rate} must be a positive number of records per second; \
                 remove it to generate as fast as possible"
            ));
        }
        match self.words_per_line {
            Some(0) => {
                return Err(
                    "words_per_line must be at least 1 (remove it for the default of 10)".into(),
                );
            }
            Some(_) if self.mode != GeneratorMode::Words => {
                return Err(format!(
                    "words_per_line only applies to mode = \"words\", but mode is {}; \
                     remove words_per_line or set mode = \"words\"",
                    self.mode.name()
                ));
            }
            _ => {}
        }
        match self.vocabulary {
            Some(0) => {
                Err("vocabulary must be at least 1 (remove it for the default of 100000)".into())
            }
            Some(v) if v > MAX_VOCABULARY => Err(format!(
                "vocabulary = {v} is too large: at most {MAX_VOCABULARY} distinct words are supported"
            )),
            Some(_) if self.mode == GeneratorMode::Sequence => Err(
                "vocabulary only applies to mode = \"words\", \"keyed_words\" or \"keyed_cycle\", \
                 but mode is \"sequence\"; remove vocabulary or choose a words mode"
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    pub(super) fn produces_keys(&self) -> bool {
        matches!(
            self.mode,
            GeneratorMode::KeyedWords | GeneratorMode::KeyedCycle
        )
    }

    pub(super) fn is_bounded(&self) -> bool {
        self.count.is_some()
    }

    pub(super) fn build(
        &self,
        subtask: usize,
        parallelism: usize,
        clock: &Clock,
    ) -> Result<Generator, ConnectorError> {
        self.validate().map_err(ConnectorError::Invalid)?;
        let words = match self.mode {
            GeneratorMode::Sequence | GeneratorMode::KeyedCycle => Vec::new(),
            GeneratorMode::Words | GeneratorMode::KeyedWords => {
                zipf_table(self.vocabulary.unwrap_or(DEFAULT_VOCABULARY))
            }
        };
        Ok(Generator {
            seed_mix: mix64(self.seed),
            end: self.count.unwrap_or(u64::MAX),
            mode: self.mode,
            words_per_line: self.words_per_line.unwrap_or(DEFAULT_WORDS_PER_LINE),
            zipf: words,
            vocabulary: u64::from(self.vocabulary.unwrap_or(DEFAULT_VOCABULARY)),
            subtask: subtask as u64,
            parallelism: parallelism as u64,
            next: subtask as u64,
            pacer: self.rate.map(|rate| Pacer::new(rate / parallelism as f64)),
            word: Vec::new(),
            event_time: self.event_time,
            clock: clock.clone(),
        })
    }
}

impl GeneratorMode {
    fn name(self) -> &'static str {
        match self {
            GeneratorMode::Sequence => "\"sequence\"",
            GeneratorMode::Words => "\"words\"",
            GeneratorMode::KeyedWords => "\"keyed_words\"",
            GeneratorMode::KeyedCycle => "\"keyed_cycle\"",
        }
    }
}

/// One subtask of the generator.
pub(super) struct Generator {
    /// `mix64(seed)`, mixed into every record's random stream.
    seed_mix: u64,
    /// One past the last global index (`u64::MAX` when unbounded).
    end: u64,
    mode: GeneratorMode,
    words_per_line: u32,
    /// Cumulative Zipf weights of the word ranks (empty in modes `sequence`, `keyed_cycle`).
    zipf: Vec<f64>,
    vocabulary: u64,
    subtask: u64,
    parallelism: u64,
    /// The global index of the next record; `≡ subtask (mod parallelism)`.
    next: u64,
    pacer: Option<Pacer>,
    /// Reused for the word of a keyed record.
    word: Vec<u8>,
    event_time: Option<EventTime>,
    /// Read once per poll for timestamps that follow it.
    clock: Clock,
}

/// Mixed into the seed of the random stream of records' disorder, apart from their values'.
const DISORDER_STREAM: u64 = 0x5eed_d150_4de4;

impl Generator {
    /// Emits record `i`, generated at `now` (ms).
    fn emit(&mut self, out: &mut Batch, i: u64, now: i64) {
        let mut rng = SplitMix64::for_record(self.seed_mix, i);
        let ts = self.event_time.map(|e| {
            e.of(
                i,
                now,
                &mut SplitMix64::for_record(self.seed_mix ^ DISORDER_STREAM, i),
            )
        });
        match self.mode {
            GeneratorMode::Sequence => {
                out.push_with(Kind::Insert, None, ts, |buf| push_decimal(buf, i));
            }
            GeneratorMode::Words => {
                let (zipf, n) = (&self.zipf, self.words_per_line);
                out.push_with(Kind::Insert, None, ts, |buf| {
                    for w in 0..n {
                        if w > 0 {
                            buf.push(b' ');
                        }
                        push_word(buf, zipf_rank(zipf, rng.next_f64()));
                    }
                });
            }
            GeneratorMode::KeyedWords | GeneratorMode::KeyedCycle => {
                let rank = match self.mode {
                    GeneratorMode::KeyedCycle => (i % self.vocabulary) as usize,
                    _ => zipf_rank(&self.zipf, rng.next_f64()),
                };
                self.word.clear();
                push_word(&mut self.word, rank);
                let word = &self.word;
                out.push_with(Kind::Insert, Some(word), ts, |buf| {
                    buf.extend_from_slice(word)
                });
            }
        }
    }
}

impl Source for Generator {
    fn poll(&mut self, out: &mut Batch, max_records: usize) -> Result<Poll, ConnectorError> {
        if self.next >= self.end {
            return Ok(Poll::Finished);
        }
        let remaining = (self.end - self.next).div_ceil(self.parallelism);
        let mut want = remaining.min(max_records as u64);
        if let Some(pacer) = &mut self.pacer {
            match pacer.grant(Instant::now(), want) {
                Ok(n) => want = n,
                Err(wait) => return Ok(Poll::Idle(wait)),
            }
        }
        let now = match self.event_time {
            Some(e) if e.clock => self.clock.now_ms(),
            _ => 0,
        };
        let mut emitted = 0;
        while emitted < want {
            self.emit(out, self.next, now);
            self.next = self.next.saturating_add(self.parallelism);
            emitted += 1;
            if out.bytes() >= BATCH_BYTES {
                break;
            }
        }
        if let Some(pacer) = &mut self.pacer {
            pacer.took(emitted);
        }
        Ok(Poll::Ready)
    }

    fn position(&self) -> SourcePosition {
        serde_json::json!({ "next": self.next })
    }

    fn restore(&mut self, position: &SourcePosition) -> Result<(), ConnectorError> {
        let next = position
            .get("next")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| {
                ConnectorError::Invalid(format!(
                    "generator: cannot restore from position {position}: expected {{\"next\": <index>}}"
                ))
            })?;
        if next % self.parallelism != self.subtask {
            return Err(ConnectorError::Invalid(format!(
                "generator subtask {} of {}: cannot restore from position {position}: index {next} \
                 belongs to subtask {}; the position was taken at another parallelism, which \
                 the generator cannot rescale from",
                self.subtask,
                self.parallelism,
                next % self.parallelism
            )));
        }
        self.next = next;
        if let Some(pacer) = &mut self.pacer {
            pacer.reset();
        }
        Ok(())
    }
}

/// Paces records to a rate with a token bucket: tokens accrue at `rate` per second up to one
/// second's worth, so a source that was not polled for a while catches up by at most that.
#[derive(Debug)]
struct Pacer {
    /// Records per second.
    rate: f64,
    /// The most tokens that can be saved up.
    burst: f64,
    tokens: f64,
    /// When tokens were last added; `None` until the first grant.
    last: Option<Instant>,
}

impl Pacer {
    fn new(rate: f64) -> Self {
        Pacer {
            rate,
            burst: rate.max(1.0),
            tokens: 0.0,
            last: None,
        }
    }

    /// Starts afresh: the next grant allows one record at once.
    fn reset(&mut self) {
        self.last = None;
    }

    /// How many of `want` records may be emitted at `now`, or how long to wait for the next.
    fn grant(&mut self, now: Instant, want: u64) -> Result<u64, Duration> {
        self.tokens = match self.last {
            Some(last) => {
                let elapsed = now.saturating_duration_since(last).as_secs_f64();
                (self.tokens + elapsed * self.rate).min(self.burst)
            }
            None => 1.0,
        };
        self.last = Some(now);
        if self.tokens >= 1.0 {
            return Ok(want.min(self.tokens as u64));
        }
        let wait = Duration::from_secs_f64((1.0 - self.tokens) / self.rate);
        Err(wait.clamp(Duration::from_micros(1), MAX_IDLE))
    }

    /// Records that `n` records were emitted.
    fn took(&mut self, n: u64) {
        self.tokens -= n as f64;
    }
}

/// SplitMix64's finalizer: a bijective 64-bit mix.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast and good enough for synthetic data.
struct SplitMix64(u64);

impl SplitMix64 {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    /// The random stream of record `index`. Mixing the index (rather than adding it to the
    /// state) keeps the streams of neighbouring records from overlapping.
    fn for_record(seed_mix: u64, index: u64) -> Self {
        SplitMix64(mix64(seed_mix ^ mix64(index.wrapping_add(Self::GAMMA))))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(Self::GAMMA);
        mix64(self.0)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Cumulative weights `1/1, 1/1 + 1/2, ...` of `n` Zipf(1) ranks.
fn zipf_table(n: u32) -> Vec<f64> {
    let mut sum = 0.0;
    (1..=n)
        .map(|k| {
            sum += 1.0 / f64::from(k);
            sum
        })
        .collect()
}

/// The 0-based rank drawn by `u` in `[0, 1)`.
fn zipf_rank(cumulative: &[f64], u: f64) -> usize {
    let total = cumulative.last().copied().unwrap_or(0.0);
    let target = u * total;
    cumulative
        .partition_point(|&c| c <= target)
        .min(cumulative.len().saturating_sub(1))
}

const CONSONANTS: &[u8; 16] = b"bdfghjklmnprstvz";
const VOWELS: &[u8; 5] = b"aeiou";
const SYLLABLES: usize = CONSONANTS.len() * VOWELS.len();

/// Appends the word of `rank`: its number in bijective base 80, one consonant-vowel syllable
/// per digit, so that every rank has its own word and frequent words are short.
fn push_word(buf: &mut Vec<u8>, rank: usize) {
    let mut n = rank;
    loop {
        let s = n % SYLLABLES;
        buf.push(CONSONANTS[s / VOWELS.len()]);
        buf.push(VOWELS[s % VOWELS.len()]);
        n /= SYLLABLES;
        if n == 0 {
            break;
        }
        n -= 1;
    }
}

/// Appends `n` in decimal.
fn push_decimal(buf: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf.extend_from_slice(&digits[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connectors::SourceConfig;
    use std::collections::{HashMap, HashSet};
    use std::path::Path;

    fn config(toml_text: &str) -> SourceConfig {
        toml::from_str(&format!("type = \"generator\"\n{toml_text}")).unwrap()
    }

    type Rec = (Option<Vec<u8>>, Vec<u8>);

    /// Everything `source` emits until it finishes, `max` records per poll.
    fn drain(source: &mut dyn Source, max: usize) -> Vec<Rec> {
        let mut out = Vec::new();
        let mut batch = Batch::default();
        loop {
            batch.clear();
            let poll = source.poll(&mut batch, max).unwrap();
            out.extend(
                batch
                    .iter()
                    .map(|r| (r.key.map(<[u8]>::to_vec), r.value.to_vec())),
            );
            if poll == Poll::Finished {
                return out;
            }
        }
    }

    fn run(cfg: &SourceConfig, parallelism: usize) -> Vec<Rec> {
        let mut all = Vec::new();
        for s in 0..parallelism {
            let mut src = cfg
                .build(Path::new("."), s, parallelism, &Clock::system())
                .unwrap();
            all.extend(drain(src.as_mut(), 7));
        }
        all
    }

    fn sorted(mut v: Vec<Rec>) -> Vec<Rec> {
        v.sort();
        v
    }

    #[test]
    fn sequence_counts_up() {
        let got = run(&config("count = 12"), 1);
        let want: Vec<Rec> = (0..12)
            .map(|i| (None, i.to_string().into_bytes()))
            .collect();
        assert_eq!(got, want);
        let got = run(&config("count = 10\nseed = 99"), 3);
        assert_eq!(sorted(got), sorted(want[..10].to_vec()));
    }

    #[test]
    fn same_seed_same_output_and_parallelism_does_not_matter() {
        for mode in ["words", "keyed_words"] {
            let cfg = config(&format!("mode = \"{mode}\"\ncount = 500\nseed = 42"));
            let one = run(&cfg, 1);
            assert_eq!(one.len(), 500);
            assert_eq!(one, run(&cfg, 1), "{mode}: not deterministic");
            assert_eq!(sorted(one.clone()), sorted(run(&cfg, 3)), "{mode}");
            let other_seed = config(&format!("mode = \"{mode}\"\ncount = 500\nseed = 43"));
            assert_ne!(one, run(&other_seed, 1), "{mode}: seed ignored");
        }
    }

    #[test]
    fn words_lines_and_keyed_words() {
        let lines = run(
            &config("mode = \"words\"\ncount = 50\nwords_per_line = 4"),
            1,
        );
        for (key, value) in &lines {
            assert!(key.is_none());
            let text = std::str::from_utf8(value).unwrap();
            assert_eq!(text.split(' ').count(), 4, "{text:?}");
            assert!(text.split(' ').all(|w| !w.is_empty()));
        }
        let keyed = run(&config("mode = \"keyed_words\"\ncount = 50"), 2);
        for (key, value) in &keyed {
            assert_eq!(key.as_deref(), Some(&value[..]));
            assert!(!value.contains(&b' '));
        }
    }

    #[test]
    fn keyed_cycle_emits_every_word_once_per_round() {
        let recs = run(
            &config("mode = \"keyed_cycle\"\ncount = 2500\nvocabulary = 1000"),
            3,
        );
        let mut freq: HashMap<Vec<u8>, usize> = HashMap::new();
        for (key, v) in recs {
            assert_eq!(key.as_deref(), Some(&v[..]));
            *freq.entry(v).or_default() += 1;
        }
        assert_eq!(freq.len(), 1000, "every word of the vocabulary");
        let twice = freq.values().filter(|&&n| n == 3).count();
        assert_eq!(twice, 500, "ranks 0..500 had a third round");
        assert!(freq.values().all(|&n| n == 2 || n == 3));
    }

    #[test]
    fn words_follow_zipf() {
        let recs = run(
            &config("mode = \"keyed_words\"\ncount = 20000\nvocabulary = 1000"),
            1,
        );
        let mut freq: HashMap<Vec<u8>, usize> = HashMap::new();
        for (_, v) in recs {
            *freq.entry(v).or_default() += 1;
        }
        let mut top = Vec::new();
        push_word(&mut top, 0);
        let mut second = Vec::new();
        push_word(&mut second, 1);
        let (f1, f2) = (freq[&top], freq[&second]);
        // H(1000) ≈ 7.49, so the top word has p ≈ 0.134 and the second half of that.
        assert!((2300..3100).contains(&f1), "{f1}");
        let ratio = f1 as f64 / f2 as f64;
        assert!((1.7..2.3).contains(&ratio), "{ratio}");
        assert!(freq.len() <= 1000);
    }

    #[test]
    fn words_are_distinct_per_rank() {
        let mut seen = HashSet::new();
        for rank in 0..20_000 {
            let mut w = Vec::new();
            push_word(&mut w, rank);
            assert!(seen.insert(w), "rank {rank} repeats a word");
        }
    }

    #[test]
    fn restore_continues_exactly() {
        let cfg = config("mode = \"words\"\ncount = 100\nseed = 5");
        for p in [1, 3] {
            for s in 0..p {
                let mut full = cfg.build(Path::new("."), s, p, &Clock::system()).unwrap();
                let all = drain(full.as_mut(), 1000);
                let mut first = cfg.build(Path::new("."), s, p, &Clock::system()).unwrap();
                let mut batch = Batch::default();
                first.poll(&mut batch, 5).unwrap();
                let pos = first.position();
                let mut second = cfg.build(Path::new("."), s, p, &Clock::system()).unwrap();
                second.restore(&pos).unwrap();
                let rest = drain(second.as_mut(), 3);
                assert_eq!(batch.len() + rest.len(), all.len());
                assert_eq!(rest, all[batch.len()..]);
            }
        }
    }

    #[test]
    fn restore_rejects_foreign_positions() {
        let cfg = config("count = 10");
        let mut src = cfg.build(Path::new("."), 1, 3, &Clock::system()).unwrap();
        let err = src.restore(&serde_json::json!({ "next": 3 })).unwrap_err();
        assert!(err.to_string().contains("belongs to subtask 0"), "{err}");
        assert!(src.restore(&serde_json::json!({ "offset": 3 })).is_err());
        src.restore(&serde_json::json!({ "next": 4 })).unwrap();
    }

    #[test]
    fn unbounded_generator_keeps_going() {
        let mut src = config("")
            .build(Path::new("."), 0, 2, &Clock::system())
            .unwrap();
        let mut batch = Batch::default();
        for _ in 0..3 {
            assert_eq!(src.poll(&mut batch, 100).unwrap(), Poll::Ready);
        }
        assert_eq!(batch.len(), 300);
        assert_eq!(src.position(), serde_json::json!({ "next": 600 }));
    }

    #[test]
    fn rate_limits_with_idle() {
        // 2 records/s over 2 subtasks: one per second each.
        let mut src = config("rate = 2")
            .build(Path::new("."), 0, 2, &Clock::system())
            .unwrap();
        let mut batch = Batch::default();
        assert_eq!(src.poll(&mut batch, 100).unwrap(), Poll::Ready);
        assert_eq!(batch.len(), 1);
        match src.poll(&mut batch, 100).unwrap() {
            Poll::Idle(d) => assert!(d > Duration::ZERO && d <= MAX_IDLE, "{d:?}"),
            other => panic!("expected Idle, got {other:?}"),
        }
        assert_eq!(batch.len(), 1);
    }

    #[test]
    fn pacer_grants_what_is_due() {
        let t0 = Instant::now();
        let mut p = Pacer::new(10.0);
        assert_eq!(p.grant(t0, 100), Ok(1));
        p.took(1);
        assert_eq!(p.grant(t0, 100), Err(Duration::from_millis(100)));
        let t = t0 + Duration::from_millis(550);
        assert_eq!(p.grant(t, 100), Ok(5));
        assert_eq!(p.grant(t, 2), Ok(2));
        p.took(2);
        assert_eq!(p.grant(t, 100), Ok(3));
        p.took(3);
        assert_eq!(p.grant(t, 100), Err(Duration::from_millis(50)));
        // After a long pause, at most a second's worth of credit remains.
        let later = t0 + Duration::from_secs(60);
        assert_eq!(p.grant(later, 1000), Ok(10));
        p.took(10);
        assert!(p.grant(later, 1000).is_err());
        assert_eq!(p.grant(later + Duration::from_millis(100), 1000), Ok(1));
    }

    #[test]
    fn validation_names_the_setting() {
        let cases = [
            ("rate = 0", "rate"),
            ("rate = -1.5", "rate"),
            ("mode = \"words\"\nwords_per_line = 0", "words_per_line"),
            ("words_per_line = 3", "words_per_line only applies"),
            ("mode = \"words\"\nvocabulary = 0", "vocabulary"),
            (
                "mode = \"keyed_words\"\nvocabulary = 20000000",
                "vocabulary",
            ),
            ("vocabulary = 10", "vocabulary only applies"),
            (
                "event_time = { clock = true, start = 5 }",
                "start and interval do not apply with clock = true",
            ),
        ];
        for (toml_text, want) in cases {
            let cfg = config(toml_text);
            let err = cfg.validate(Path::new(".")).unwrap_err();
            assert!(err.contains(want), "{toml_text}: {err}");
            assert!(cfg.build(Path::new("."), 0, 1, &Clock::system()).is_err());
        }
        config("mode = \"words\"\nwords_per_line = 3\nvocabulary = 10\nrate = 0.5")
            .validate(Path::new("."))
            .unwrap();
    }

    #[test]
    fn clock_timestamps_are_the_time_of_generation_less_the_disorder() {
        let cfg = config("count = 2000\nevent_time = { clock = true, max_disorder = \"10ms\" }");
        let clock = Clock::manual(50_000);
        let mut src = cfg.build(Path::new("."), 0, 1, &clock).unwrap();
        let mut batch = Batch::default();
        let mut delays = HashSet::new();
        for now in [50_000, 60_000] {
            clock.set(now);
            batch.clear();
            src.poll(&mut batch, 1000).unwrap();
            assert_eq!(batch.len(), 1000);
            delays.extend(batch.iter().map(|r| now - r.timestamp.unwrap()));
        }
        // Every delay within the disorder, each drawn for its record.
        assert_eq!(delays, (0..=10).collect::<HashSet<i64>>());
    }

    #[test]
    fn decimal() {
        for n in [0, 7, 10, 12345, u64::MAX] {
            let mut buf = Vec::new();
            push_decimal(&mut buf, n);
            assert_eq!(buf, n.to_string().into_bytes());
        }
    }
}
