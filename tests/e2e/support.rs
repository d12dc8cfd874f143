//! Locating the binary and the components, writing specs, running jobs, reading output.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tempfile::TempDir;

/// The workspace root: the parent of this package's directory, which `cargo test` gives at run
/// time (the compile-time path is another checkout's when a shared target directory reuses
/// a test binary built there).
pub fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .parent()
        .expect("the e2e crate lives one level below the workspace root")
        .to_path_buf()
}

/// `<target>/release`: this test executable is `<target>/release/deps/e2e-<hash>`.
pub fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test executable lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// The `weir` binary: `$WEIR_BIN`, else `<target>/release/weir`.
pub fn weir_bin() -> PathBuf {
    let bin = match std::env::var_os("WEIR_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => release_dir().join("weir"),
    };
    assert!(
        bin.is_file(),
        "{} does not exist; run `cargo build --release -p weir` (and the tests with --release), \
         or set WEIR_BIN to the weir binary",
        bin.display()
    );
    bin
}

/// The component built from the guest package whose wasm file is `<name>.wasm`.
pub fn operator(name: &str) -> PathBuf {
    let path = repo()
        .join("build")
        .join("operators")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} does not exist; run `cargo xtask guests` to build the guest components",
        path.display()
    );
    path
}

/// `path` as a TOML string.
pub fn toml_path(path: &Path) -> String {
    toml_str(&path.to_string_lossy())
}

/// `text` as a TOML basic string.
pub fn toml_str(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `wasm = "<abs path of the component>"`.
pub fn wasm(name: &str) -> String {
    format!("wasm = {}", toml_path(&operator(name)))
}

/// A temporary directory for one test: its job spec, inputs and outputs. With `WEIR_KEEP`
/// set, it stays behind (`/tmp/weir-e2e-*`) for a look at a failed test's logs and files.
pub struct Workspace {
    dir: TempDir,
}

impl Workspace {
    pub fn new() -> Workspace {
        Workspace {
            dir: tempfile::Builder::new()
                .prefix("weir-e2e-")
                .disable_cleanup(std::env::var_os("WEIR_KEEP").is_some())
                .tempdir()
                .expect("a temporary directory"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `contents` to `name` and returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write into the test directory");
        path
    }

    /// Writes the spec `job.toml` and runs `weir run` on it.
    pub fn run(&self, spec: &str) -> Run {
        let path = self.write("job.toml", spec);
        weir(&["run", "--no-progress"], &path)
    }

    /// Like [`Workspace::run`], and asserts that the job succeeded.
    pub fn run_ok(&self, spec: &str) -> Run {
        let run = self.run(spec);
        assert!(run.success(), "the job failed:\n{spec}\n{run}");
        run
    }

    /// The command `weir run` on `spec`, writing the job's summary into the workspace's
    /// `summary.json` (read it with [`Workspace::summary`]).
    pub fn summary_command(&self, spec: &Path) -> Command {
        let summary = self.path("summary.json");
        let args = [
            "run",
            "--no-progress",
            "--summary-json",
            summary.to_str().unwrap(),
        ];
        weir_command(&args, spec)
    }

    /// Runs [`Workspace::summary_command`] to its end.
    pub fn run_with_summary(&self, spec: &Path) -> Run {
        let output = (self.summary_command(spec).output()).expect("cannot start the weir binary");
        Run { output }
    }

    /// The summary the last job wrote (see [`Workspace::summary_command`]).
    pub fn summary(&self) -> serde_json::Value {
        let path = self.path("summary.json");
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("weir wrote no summary {}: {e}", path.display()));
        serde_json::from_slice(&bytes).expect("the summary is JSON")
    }
}

/// `weir <args> <spec>`, with a compiled-component cache shared by the tests.
pub fn weir(args: &[&str], spec: &Path) -> Run {
    let output = weir_command(args, spec)
        .output()
        .expect("cannot start the weir binary");
    Run { output }
}

/// The command `weir <args> <spec>` with the shared component cache and without `WEIR_LOG`,
/// for tests that start `weir` and signal or kill it while it runs.
pub fn weir_command(args: &[&str], spec: &Path) -> Command {
    let mut cmd = Command::new(weir_bin());
    cmd.arg("--cache-dir")
        .arg(release_dir().join("e2e-component-cache"))
        .args(args)
        .arg(spec)
        .env_remove("WEIR_LOG");
    cmd
}

/// The outcome of one `weir` command.
pub struct Run {
    pub output: Output,
}

impl Run {
    pub fn success(&self) -> bool {
        self.output.status.success()
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    /// Asserts an orderly failure: exit code 1 (not a signal), `error: ` on stderr, and no
    /// panic of the host.
    pub fn assert_clean_failure(&self) {
        assert_eq!(
            self.output.status.code(),
            Some(1),
            "expected exit code 1:\n{self}"
        );
        let stderr = self.stderr();
        assert!(stderr.contains("error: "), "no `error:` line:\n{self}");
        assert!(
            !stderr.contains("thread '") && !stderr.contains("RUST_BACKTRACE"),
            "the host panicked:\n{self}"
        );
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status: {}\n--- stdout\n{}--- stderr\n{}",
            self.output.status,
            self.stdout(),
            self.stderr()
        )
    }
}

/// The lines of the finished part files (`part-<subtask>-<n>`) in `dir`, by subtask index, each
/// subtask's files in order: what a reader that skips hidden files sees.
pub fn part_files(dir: &Path) -> BTreeMap<usize, Vec<String>> {
    let mut files = BTreeMap::new();
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list the sink output {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((subtask, n)) = name.strip_prefix("part-").and_then(|rest| {
            let (s, n) = rest.split_once('-')?;
            Some((s.parse::<usize>().ok()?, n.parse::<u64>().ok()?))
        }) else {
            continue;
        };
        files.insert((subtask, n), entry.path());
    }
    let mut parts: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for ((subtask, _), path) in files {
        let text = std::fs::read_to_string(&path).expect("a readable part file");
        parts
            .entry(subtask)
            .or_default()
            .extend(text.lines().map(str::to_owned));
    }
    parts
}

/// The finished output of subtask `subtask` of the file sink writing into `dir`, as text.
pub fn part_text(dir: &Path, subtask: usize) -> String {
    part_files(dir)
        .remove(&subtask)
        .map(|lines| lines.iter().map(|l| format!("{l}\n")).collect())
        .unwrap_or_default()
}

/// Splits a `key<TAB>value` line.
pub fn key_value(line: &str) -> (&str, &str) {
    line.split_once('\t')
        .unwrap_or_else(|| panic!("expected `key<TAB>value`, got {line:?}"))
}

/// Counts of `text`'s words (split on ASCII whitespace, as the split operators do).
pub fn count_words<'a>(
    texts: impl IntoIterator<Item = &'a str>,
    lowercase: bool,
) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for text in texts {
        for word in text.split_ascii_whitespace() {
            let word = if lowercase {
                word.to_lowercase()
            } else {
                word.to_owned()
            };
            *counts.entry(word).or_insert(0) += 1;
        }
    }
    counts
}

/// The two operators of the word count as spec tables: `split` (the `wasm = ...` or
/// `native = ...` line `split`), reading `input` over a rebalance edge, and `count` (likewise),
/// reading `split` by key. A sink reads `count`.
pub fn word_count_operators(input: &str, split: &str, count: &str) -> String {
    format!(
        r#"
[[operator]]
name = "split"
uid = "split"
{split}
input = "{input}"
edge = "rebalance"

[[operator]]
name = "count"
uid = "count"
{count}
input = "split"
edge = "key_by"
"#
    )
}

/// The keyer and the state probe as spec tables: `keyer` reads `input` (with `keyer_extra`
/// added to its table), `probe` reads `keyer` by key; a sink reads `probe`.
pub fn keyed_probe_operators(input: &str, keyer_extra: &str) -> String {
    keyed_operators(input, keyer_extra, "weir_test_state_probe")
}

/// [`keyed_probe_operators`] with component `probe` (e.g. the Python state probe) as `probe`.
pub fn keyed_operators(input: &str, keyer_extra: &str, probe: &str) -> String {
    format!(
        r#"
[[operator]]
name = "keyer"
uid = "keyer"
{keyer}
input = "{input}"
{keyer_extra}

[[operator]]
name = "probe"
uid = "probe"
{probe}
input = "keyer"
edge = "key_by"
"#,
        keyer = wasm("weir_test_keyer"),
        probe = wasm(probe),
    )
}

/// A file sink table `out` reading `input`, writing `key<TAB>value` lines into `path`.
pub fn key_value_file_sink(input: &str, path: &Path) -> String {
    format!(
        "\n[[sink]]\nname = \"out\"\ntype = \"file\"\ninput = \"{input}\"\npath = {}\nformat = \"key_value\"\n",
        toml_path(path)
    )
}

/// The tally guest (job `tally`) at parallelism `tally` with config `config` (a TOML
/// value), over `count` generated numbers at `rate` a second, rebalanced into a file sink in
/// `out/`, checkpointed every 50 ms.
pub fn tally_job(ws: &Workspace, tally: u32, config: &str, count: u64, rate: u64) -> PathBuf {
    ws.write(
        &format!("tally-{tally}.toml"),
        format!(
            r#"[job]
name = "tally"

[checkpoint]
interval = "50ms"
dir = {chk}

[[source]]
name = "seq"
type = "generator"
count = {count}
rate = {rate}

[[operator]]
name = "tally"
uid = "tally"
{wasm}
input = "seq"
edge = "rebalance"
parallelism = {tally}
config = {config}

[[sink]]
name = "out"
type = "file"
input = "tally"
edge = "rebalance"
path = {out}
"#,
            chk = toml_path(&ws.path("chk")),
            wasm = wasm("weir_test_tally"),
            out = toml_path(&ws.path("out")),
        ),
    )
}
