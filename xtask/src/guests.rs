//! `cargo xtask guests`: build every guest component and copy it to `build/operators/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::{build_weir, cargo, exec, repo, target_dir};

/// The target guests are built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The cargo profile guests are built with (see the root Cargo.toml).
const PROFILE: &str = "guest";

/// Every guest crate, by package name; its component is `<name with _ for ->.wasm`.
pub const PACKAGES: &[&str] = &[
    "wordcount-split",
    "wordcount-count",
    "clickstream-parse",
    "clickstream-profile",
    "orders-parse",
    "orders-unpaid",
    "bench-scorer-parse",
    "bench-scorer-score",
    "bench-topn",
    "bench-events-parse",
    "bench-window-count",
    "weir-test-state-probe",
    "weir-test-poison",
    "weir-test-other-world",
    "weir-test-wrong-version",
    "weir-test-keyer",
    "weir-test-tally",
    "weir-test-recount",
    "weir-test-hostile",
    "weir-test-unknown-import",
    "weir-test-windows",
    "weir-test-window-aggregate",
    "weir-test-window-process",
];

/// The TypeScript compiler that checks the TypeScript example (`node_test`).
const TYPESCRIPT: &str = "typescript@6.0.3";

/// Python, JavaScript and TypeScript guests: the module (a `.py`, `.js` or `.ts` file under
/// the repository) and its component's name.
pub const SCRIPTED: &[(&str, &str)] = &[
    ("examples/wordcount/python/split.py", "wordcount_split_py"),
    ("examples/wordcount/python/count.py", "wordcount_count_py"),
    (
        "examples/clickstream/python/parse.py",
        "clickstream_parse_py",
    ),
    (
        "examples/clickstream/python/user_profile.py",
        "clickstream_profile_py",
    ),
    (
        "tests/guests/python/state_probe.py",
        "weir_test_state_probe_py",
    ),
    ("tests/guests/python/hostile.py", "weir_test_hostile_py"),
    (
        "tests/guests/python/window_aggregate.py",
        "weir_test_window_aggregate_py",
    ),
    (
        "tests/guests/python/window_process.py",
        "weir_test_window_process_py",
    ),
    ("examples/wordcount/ts/split.ts", "wordcount_split_ts"),
    ("examples/wordcount/ts/count.ts", "wordcount_count_ts"),
    ("examples/wordcount/js/split.js", "wordcount_split_js"),
    ("examples/wordcount/js/count.js", "wordcount_count_js"),
    ("examples/clickstream/js/parse.js", "clickstream_parse_js"),
    (
        "examples/clickstream/js/profile.js",
        "clickstream_profile_js",
    ),
    ("tests/guests/js/state_probe.js", "weir_test_state_probe_js"),
    ("tests/guests/js/hostile.js", "weir_test_hostile_js"),
    (
        "tests/guests/js/window_aggregate.js",
        "weir_test_window_aggregate_js",
    ),
    (
        "tests/guests/js/window_process.js",
        "weir_test_window_process_js",
    ),
];

/// Where the components are copied to.
pub fn operators_dir() -> PathBuf {
    repo().join("build").join("operators")
}

/// Every guest: the Rust ones, then the Python and JavaScript ones.
pub fn run() -> Result<()> {
    rust()?;
    scripted(&operators_dir())
}

/// The Rust guests.
pub fn rust() -> Result<()> {
    ensure_target()?;
    let mut build = cargo();
    build.args(["build", "--profile", PROFILE, "--target", TARGET]);
    for package in PACKAGES {
        build.args(["-p", package]);
    }
    exec(&mut build)?;

    let built = target_dir()?.join(TARGET).join(PROFILE);
    let dest = operators_dir();
    std::fs::create_dir_all(&dest).with_context(|| format!("cannot create {}", dest.display()))?;
    for package in PACKAGES {
        let file = format!("{}.wasm", package.replace('-', "_"));
        let (from, to) = (built.join(&file), dest.join(&file));
        std::fs::copy(&from, &to)
            .with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
    }
    println!("{} components in {}", PACKAGES.len(), dest.display());
    Ok(())
}

/// Builds the Python and JavaScript guests into `dest` with `weir build` (which installs
/// componentize-py, componentize-js and esbuild on first use and compiles each into the
/// component cache the end-to-end tests use). Each build is kept in the target directory
/// under the hash of what goes into it (its module's directory, its SDK, the WIT contract
/// and `weir build`'s own code), so that a run whose guests did not change — a fresh clone
/// in CI included — copies them rather than spend some 17 s on each.
fn scripted(dest: &Path) -> Result<()> {
    let weir = build_weir()?;
    let repo = repo();
    let kept = target_dir()?.join("scripted-guests");
    std::fs::create_dir_all(&kept).with_context(|| format!("cannot create {}", kept.display()))?;
    let shared = [
        repo.join("wit/stream.wit"),
        repo.join("host/src/cli/build.rs"),
    ];
    let (mut built, mut copied) = (0, 0);
    for (module, name) in SCRIPTED {
        let module = repo.join(module);
        let ext = module.extension().and_then(|e| e.to_str()).unwrap_or("");
        let (sdk, sdk_ext) = match ext {
            "py" => (repo.join("guest-sdk/python/weir"), "py"),
            _ => (repo.join("guest-sdk/js/src"), "js"),
        };
        let dir = module.parent().expect("a module is in a directory");
        let mut inputs = shared.to_vec();
        inputs.extend(files_in(&sdk, sdk_ext)?);
        inputs.extend(files_in(dir, ext)?);
        let key = hash(&repo, &module, &inputs)?;
        let cached = kept.join(format!("{name}-{key:016x}.wasm"));
        let out = dest.join(format!("{name}.wasm"));
        if !cached.exists() {
            exec(
                Command::new(&weir)
                    .arg("--cache-dir")
                    .arg(crate::e2e_component_cache()?)
                    .arg("build")
                    .arg(&module)
                    .arg("-o")
                    .arg(&out),
            )?;
            std::fs::copy(&out, &cached).with_context(|| {
                format!("cannot keep {} as {}", out.display(), cached.display())
            })?;
            built += 1;
        } else {
            std::fs::copy(&cached, &out).with_context(|| {
                format!("cannot copy {} to {}", cached.display(), out.display())
            })?;
            copied += 1;
        }
    }
    println!(
        "{} Python, JavaScript and TypeScript components in {} ({built} built, {copied} \
         unchanged)",
        SCRIPTED.len(),
        dest.display()
    );
    Ok(())
}

/// A hash of `module`'s name and of the names and contents of `files`, in a stable order;
/// names relative to `repo`, so that every clone gets the same.
fn hash(repo: &Path, module: &Path, files: &[PathBuf]) -> Result<u64> {
    use std::hash::{Hash, Hasher};
    let relative = |p: &Path| p.strip_prefix(repo).unwrap_or(p).to_path_buf();
    let mut files = files.to_vec();
    files.sort();
    let mut hasher = std::hash::DefaultHasher::new();
    relative(module).hash(&mut hasher);
    for f in &files {
        relative(f).hash(&mut hasher);
        std::fs::read(f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .hash(&mut hasher);
    }
    Ok(hasher.finish())
}

/// The files with extension `ext` in `dir`.
fn files_in(dir: &Path, ext: &str) -> Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    Ok(entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect())
}

/// Installs the guest target with rustup unless it is there already.
fn ensure_target() -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("cannot run `rustup target list --installed`; is rustup installed?")?;
    let installed = String::from_utf8_lossy(&out.stdout);
    if !installed.lines().any(|l| l.trim() == TARGET) {
        println!("installing the {TARGET} target");
        exec(Command::new("rustup").args(["target", "add", TARGET]))?;
    }
    Ok(())
}

/// The JavaScript SDK's tests and the JavaScript examples' tests, with `node --test`; the
/// repository's `node_modules/weir-sdk` (made here) points at the SDK.
pub fn node_test() -> Result<()> {
    let repo = repo();
    let link = repo.join("node_modules").join("weir-sdk");
    if !link.exists() {
        std::fs::create_dir_all(repo.join("node_modules"))?;
        std::os::unix::fs::symlink("../guest-sdk/js", &link)
            .with_context(|| format!("cannot link {}", link.display()))?;
    }
    exec(
        Command::new("node")
            .args(["--test", "guest-sdk/js/test/", "examples/wordcount/js/"])
            .current_dir(&repo),
    )?;
    // The TypeScript example against the SDK's declarations, with tsc (installed once).
    exec(
        Command::new(typescript()?)
            .args(["-p", "examples/wordcount/ts"])
            .current_dir(&repo),
    )
}

/// `tsc` of [`TYPESCRIPT`], installed with npm beside the build on first use (a directory
/// per version, so that a new pin installs anew).
fn typescript() -> Result<PathBuf> {
    let dir = target_dir()?.join(TYPESCRIPT);
    let tsc = dir.join("node_modules/.bin/tsc");
    if !tsc.exists() {
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("package.json"), "{\"private\": true}\n")?;
        exec(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--silent"])
                .arg(TYPESCRIPT)
                .current_dir(&dir),
        )?;
    }
    Ok(tsc)
}

/// The Python SDK's tests and the Python examples' tests, with pytest in a virtual
/// environment of their own (made once, beside the build).
pub fn pytest() -> Result<()> {
    let venv = target_dir()?.join("pytest-venv");
    let python = venv.join("bin").join("python");
    if !python.exists() {
        exec(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        exec(Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "pytest>=7",
            "cbor2>=5.4",
        ]))?;
    }
    let repo = repo();
    exec(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .current_dir(repo.join("guest-sdk/python")),
    )?;
    exec(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .env("PYTHONPATH", repo.join("guest-sdk/python"))
            .current_dir(repo.join("examples/wordcount/python")),
    )
}
