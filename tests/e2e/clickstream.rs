//! The clickstream example prints exactly the profiles computed here from its clicks.

use std::collections::{BTreeMap, HashMap};

use crate::support::{Workspace, part_text, repo, weir};

/// What the profile operator must print for each click, per user in click order.
fn expected(clicks: &str) -> BTreeMap<String, Vec<String>> {
    let mut visits: HashMap<&str, BTreeMap<&str, u64>> = HashMap::new();
    let mut recent: HashMap<&str, Vec<&str>> = HashMap::new();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in clicks.lines() {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        let [user, page] = fields[..] else { continue };
        let pages = visits.entry(user).or_default();
        *pages.entry(page).or_default() += 1;
        // Most visits; among equals the smallest page (the map iterates in page order).
        let (top, top_n) = pages
            .iter()
            .fold(None, |best: Option<(&str, u64)>, (&p, &n)| match best {
                Some((_, m)) if m >= n => best,
                _ => Some((p, n)),
            })
            .expect("the user has a page");
        let last = recent.entry(user).or_default();
        last.push(page);
        if last.len() > 3 {
            last.remove(0);
        }
        out.entry(user.to_owned()).or_default().push(format!(
            "top={top}:{top_n} distinct={} recent={}",
            pages.len(),
            last.join(",")
        ));
    }
    out
}

/// The lines of `clicks` that are not `<user> <page>`.
/// Held by each test that runs the example's jobs: they write into the example's own
/// `output/` directories, and two runs of one job at once would write the same part files.
static EXAMPLE_OUTPUT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The example's directory, for as long as the guard is held.
fn example() -> (std::path::PathBuf, std::sync::MutexGuard<'static, ()>) {
    let guard = EXAMPLE_OUTPUT.lock().unwrap_or_else(|e| e.into_inner());
    (repo().join("examples/clickstream"), guard)
}

fn malformed(clicks: &str) -> Vec<&str> {
    clicks
        .lines()
        .filter(|l| l.split_ascii_whitespace().count() != 2)
        .collect()
}

#[test]
fn the_example_prints_the_expected_profiles() {
    let (example, _output) = example();
    let clicks = std::fs::read_to_string(example.join("clicks.txt")).expect("clicks.txt");
    let want = expected(&clicks);
    assert!(want.len() > 3 && want.values().any(|v| v.len() > 10));

    let run = weir(&["run", "--no-progress"], &example.join("job.toml"));
    assert!(run.success(), "{run}");
    // `<subtask>> <user>\t<profile>`; the summary table's lines do not look like that.
    let mut subtask_of: HashMap<String, String> = HashMap::new();
    let mut got: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in run.stdout().lines() {
        let Some((subtask, rest)) = line.split_once("> ") else {
            continue;
        };
        if subtask.is_empty() || !subtask.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let (user, profile) = rest
            .split_once('\t')
            .unwrap_or_else(|| panic!("not `user<TAB>profile`: {line:?}"));
        let first = subtask_of
            .entry(user.to_owned())
            .or_insert_with(|| subtask.to_owned());
        assert_eq!(first, subtask, "user {user} is profiled by two subtasks");
        got.entry(user.to_owned())
            .or_default()
            .push(profile.to_owned());
    }
    assert_eq!(got, want, "\n{run}");

    // The lines that are not `<user> <page>` reach the side output's sink, unchanged.
    let malformed = malformed(&clicks);
    assert!(
        !malformed.is_empty(),
        "clicks.txt has malformed lines to route"
    );
    let side = part_text(&example.join("output/malformed"), 0);
    assert_eq!(side.lines().collect::<Vec<_>>(), malformed);
}

#[test]
fn the_expected_profiles_follow_the_documented_rules() {
    // A check of the reference computation itself, on a hand-made case.
    let want = expected("ann /z\nann /b\nbad line here\nann /z\nann /b\nbob /x\nann /c\n");
    assert_eq!(
        want["ann"],
        [
            "top=/z:1 distinct=1 recent=/z",
            "top=/b:1 distinct=2 recent=/z,/b",
            "top=/z:2 distinct=2 recent=/z,/b,/z",
            "top=/b:2 distinct=2 recent=/b,/z,/b",
            "top=/b:2 distinct=3 recent=/z,/b,/c",
        ]
    );
    assert_eq!(want["bob"], ["top=/x:1 distinct=1 recent=/x"]);
}

#[test]
fn the_sessions_example_prints_each_users_sessions() {
    let (example, _output) = example();
    let clicks = std::fs::read_to_string(example.join("sessions.txt")).expect("sessions.txt");
    // Sessions computed here: a user's clicks no more than 30 minutes apart, in time order.
    const GAP: i64 = 30 * 60 * 1000;
    let mut times: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for line in clicks.lines() {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        times
            .entry(fields[0])
            .or_default()
            .push(fields[2].parse().unwrap());
    }
    let mut want = Vec::new();
    for (user, mut ts) in times {
        ts.sort_unstable();
        let mut first = 0;
        for i in 1..=ts.len() {
            if i == ts.len() || ts[i] - ts[i - 1] > GAP {
                want.push(format!(
                    "{user}\t{},{},{}",
                    ts[first],
                    ts[i - 1] + GAP,
                    i - first
                ));
                first = i;
            }
        }
    }
    want.sort();
    assert!(want.len() > 8, "the sample has several sessions per user");

    let ws = Workspace::new();
    let now_ms = || {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        since.unwrap().as_millis() as f64
    };
    let started = now_ms();
    let run = ws.run_with_summary(&example.join("sessions.toml"));
    let ended = now_ms();
    assert!(run.success(), "{run}");
    // The sample is one batch: one watermark, a minute behind its latest click, which
    // `parse` makes and `sessions` fires on; the summary shows it for both.
    let latest: i64 = (clicks.lines())
        .map(|l| {
            l.split_ascii_whitespace()
                .nth(2)
                .unwrap()
                .parse::<i64>()
                .unwrap()
        })
        .max()
        .unwrap();
    let summary = ws.summary();
    let watermark = |name: &str| {
        let vertices = summary["vertices"].as_array().unwrap();
        let v = vertices.iter().find(|v| v["name"] == name).unwrap();
        v["watermark"].as_i64()
    };
    assert_eq!(watermark("parse"), Some(latest - 60_000 - 1));
    assert_eq!(watermark("sessions"), Some(latest - 60_000 - 1));
    assert_eq!(watermark("clicks"), None, "the file source makes none");
    // Each session came out between the run's start and end, its timestamp the session's
    // last millisecond: the sink's event-time lag is within those bounds (and 1 %).
    let lag = &(summary["vertices"].as_array().unwrap().iter())
        .find(|v| v["name"] == "out")
        .unwrap()["event_time_lag"];
    assert_eq!(lag["records"].as_u64(), Some(want.len() as u64), "{lag}");
    let ends = want.iter().map(|l| {
        let (_, window) = l.split_once('\t').unwrap();
        window.split(',').nth(1).unwrap().parse::<f64>().unwrap() - 1.0
    });
    let (first_end, last_end) =
        ends.fold((f64::MAX, f64::MIN), |(lo, hi), e| (lo.min(e), hi.max(e)));
    let (p50, max) = (
        lag["p50_ms"].as_f64().unwrap(),
        lag["max_ms"].as_f64().unwrap(),
    );
    assert!(p50 >= (started - last_end) * 0.99 && p50 <= max, "{lag}");
    assert!(max <= (ended - first_end) * 1.01, "{lag}");
    let mut got: Vec<String> = run
        .stdout()
        .lines()
        .filter_map(|l| l.split_once("> ").map(|(_, rest)| rest.to_owned()))
        .collect();
    got.sort();
    assert_eq!(got, want);
    let expected = std::fs::read_to_string(example.join("sessions.expected")).unwrap();
    assert_eq!(
        expected.lines().collect::<Vec<_>>(),
        want,
        "sessions.expected is stale"
    );
}

#[test]
fn the_python_and_javascript_examples_print_what_the_rust_one_prints() {
    // examples/clickstream/{python,js}: the profiles (map and list state, a side output)
    // and the sessions (event time parsed by the guest, a session window of the host).
    let (example, _output) = example();
    let printed = |spec: &std::path::Path| {
        let run = weir(&["run", "--no-progress"], spec);
        assert!(run.success(), "{}: {run}", spec.display());
        let mut lines: Vec<String> = (run.stdout().lines())
            .filter_map(|l| l.split_once("> ").map(|(_, rest)| rest.to_owned()))
            .collect();
        lines.sort();
        lines
    };
    for job in ["job.toml", "sessions.toml"] {
        let rust = printed(&example.join(job));
        assert!(rust.len() > 10, "{rust:?}");
        for lang in ["python", "js"] {
            let other = printed(&example.join(lang).join(job));
            assert!(
                other == rust,
                "{lang}/{job} prints otherwise:\n{other:?}\n{rust:?}"
            );
        }
    }
    // Their parse operators route what they cannot read to the side output, unchanged and
    // in order, as the Rust one does.
    let clicks = std::fs::read_to_string(example.join("clicks.txt")).expect("clicks.txt");
    let malformed: Vec<&str> = malformed(&clicks);
    for lang in ["python", "js"] {
        let side = part_text(&example.join(lang).join("output/malformed"), 0);
        assert_eq!(side.lines().collect::<Vec<_>>(), malformed, "{lang}");
    }
}
