//! `weir new` scaffolds an operator project; `weir build` builds one into a component and
//! checks it as a job would load it.
//!
//! Rust projects build with cargo (for `wasm32-wasip2`, installed with rustup when missing);
//! Python projects with componentize-py, which `weir build` installs once into a virtual
//! environment in the cache directory; JavaScript projects with esbuild (bundling the module
//! with the SDK) and componentize-js, installed once with npm there. The Python and
//! JavaScript SDKs and the WIT contract are part of this binary, so a project builds against
//! the contract of the host that will run it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use weir::{Limits, WasmEngine};

/// The languages an operator can be written in.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lang {
    Rust,
    Python,
    Js,
    /// TypeScript: built as JavaScript is (esbuild drops the types); `weir new` makes a
    /// project whose test type-checks with `tsc` first.
    Ts,
}

/// The componentize-py `weir build` installs for Python projects.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

/// What `weir build` installs with npm for JavaScript projects.
const JS_TOOLS: &[&str] = &[
    "@bytecodealliance/componentize-js@0.23.0",
    "esbuild@0.25.12",
];

/// The JavaScript SDK's files (package `weir-sdk`), and the script that builds a component.
const JS_SDK: &[(&str, &str)] = &[
    (
        "package.json",
        include_str!("../../../guest-sdk/js/package.json"),
    ),
    ("README.md", include_str!("../../../guest-sdk/js/README.md")),
    (
        "index.d.ts",
        include_str!("../../../guest-sdk/js/index.d.ts"),
    ),
    (
        "testing.d.ts",
        include_str!("../../../guest-sdk/js/testing.d.ts"),
    ),
    (
        "src/cbor.js",
        include_str!("../../../guest-sdk/js/src/cbor.js"),
    ),
    (
        "src/component.js",
        include_str!("../../../guest-sdk/js/src/component.js"),
    ),
    (
        "src/index.js",
        include_str!("../../../guest-sdk/js/src/index.js"),
    ),
    (
        "src/runtime.js",
        include_str!("../../../guest-sdk/js/src/runtime.js"),
    ),
    (
        "src/testing.js",
        include_str!("../../../guest-sdk/js/src/testing.js"),
    ),
    (
        "src/types.js",
        include_str!("../../../guest-sdk/js/src/types.js"),
    ),
    (
        "src/wire.js",
        include_str!("../../../guest-sdk/js/src/wire.js"),
    ),
    (
        "src/window.js",
        include_str!("../../../guest-sdk/js/src/window.js"),
    ),
];
const JS_BUILD: &str = include_str!("../../../guest-sdk/js/tools/build.mjs");

/// The WIT contract, as the host implements it.
const WIT: &str = include_str!("../../../wit/stream.wit");

/// The Python SDK's files, written out for componentize-py (and for `pip install`).
const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "pyproject.toml",
        include_str!("../../../guest-sdk/python/pyproject.toml"),
    ),
    (
        "README.md",
        include_str!("../../../guest-sdk/python/README.md"),
    ),
    (
        "weir/__init__.py",
        include_str!("../../../guest-sdk/python/weir/__init__.py"),
    ),
    (
        "weir/_guest.py",
        include_str!("../../../guest-sdk/python/weir/_guest.py"),
    ),
    (
        "weir/_runtime.py",
        include_str!("../../../guest-sdk/python/weir/_runtime.py"),
    ),
    (
        "weir/_wire.py",
        include_str!("../../../guest-sdk/python/weir/_wire.py"),
    ),
    (
        "weir/cbor.py",
        include_str!("../../../guest-sdk/python/weir/cbor.py"),
    ),
    (
        "weir/operator.py",
        include_str!("../../../guest-sdk/python/weir/operator.py"),
    ),
    (
        "weir/testing.py",
        include_str!("../../../guest-sdk/python/weir/testing.py"),
    ),
    (
        "weir/types.py",
        include_str!("../../../guest-sdk/python/weir/types.py"),
    ),
    (
        "weir/window.py",
        include_str!("../../../guest-sdk/python/weir/window.py"),
    ),
];

/// Where the Rust SDK of this checkout is, if this binary was built from one that is still
/// there.
fn rust_sdk_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
    dir.join("Cargo.toml")
        .exists()
        .then(|| dir.canonicalize().unwrap_or(dir))
}

/// Writes `files` under `dir` (named by a hash of their content) unless they are there.
fn materialize(cache: &Path, name: &str, files: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    let mut h = Sha256::new();
    for (path, text) in files {
        h.update(path.as_bytes());
        h.update(text.as_bytes());
    }
    let hash = h.finalize();
    let dir = cache.join(format!(
        "{name}-{:02x}{:02x}{:02x}{:02x}",
        hash[0], hash[1], hash[2], hash[3]
    ));
    if dir.join(".complete").exists() {
        return Ok(dir);
    }
    let partial = cache.join(format!(".{name}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&partial);
    for (path, text) in files {
        let file = partial.join(path);
        std::fs::create_dir_all(file.parent().expect("a file has a parent"))
            .and_then(|()| std::fs::write(&file, text))
            .with_context(|| format!("cannot write {}", file.display()))?;
    }
    std::fs::write(partial.join(".complete"), "")?;
    match std::fs::rename(&partial, &dir) {
        Ok(()) => Ok(dir),
        // Another build wrote it meanwhile.
        Err(_) if dir.join(".complete").exists() => {
            let _ = std::fs::remove_dir_all(&partial);
            Ok(dir)
        }
        Err(e) => Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
}

/// The Python SDK, written out in the cache: a directory with `weir/` and a `pyproject.toml`.
pub(super) fn python_sdk(cache: &Path) -> anyhow::Result<PathBuf> {
    materialize(cache, "python-sdk", PYTHON_SDK)
}

/// The JavaScript SDK, written out in the cache: `<dir>/node_modules/weir-sdk`, so that a
/// bundler given `<dir>/node_modules` finds the package (and `npm install <dir>/node_modules/weir-sdk` works).
pub(super) fn js_sdk(cache: &Path) -> anyhow::Result<PathBuf> {
    let files: Vec<(String, &str)> = JS_SDK
        .iter()
        .map(|(path, text)| (format!("node_modules/weir-sdk/{path}"), *text))
        .collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    materialize(cache, "js-sdk", &files)
}

/// The directory with esbuild and componentize-js installed (once, with npm) and the build
/// script.
fn js_tools(cache: &Path) -> anyhow::Result<PathBuf> {
    let dir = cache.join("tools").join("componentize-js-0.23.0");
    if !dir
        .join("node_modules/@bytecodealliance/componentize-js")
        .exists()
        || !dir.join("node_modules/esbuild").exists()
    {
        eprintln!(
            "weir: installing {} into {} (once)",
            JS_TOOLS.join(" and "),
            dir.display()
        );
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("package.json"),
            "{\"private\": true, \"type\": \"module\"}\n",
        )?;
        run(
            Command::new("npm")
                .args(["install", "--no-audit", "--no-fund", "--silent"])
                .args(JS_TOOLS)
                .current_dir(&dir),
            "installing componentize-js and esbuild with npm (is Node.js 18 or later with npm \
             installed?)",
        )?;
    }
    std::fs::write(dir.join("build.mjs"), JS_BUILD)?;
    Ok(dir)
}

/// Runs `command`, failing with `what` and its output if it fails.
fn run(command: &mut Command, what: &str) -> anyhow::Result<()> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {:?} ({what})", command.get_program()))?;
    if !out.status.success() {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            without_backtrace(&text)
        );
    }
    Ok(())
}

/// `text` up to a Rust backtrace (componentize-py prints its own after the Python error).
fn without_backtrace(text: &str) -> &str {
    let end = text.find("\nStack backtrace:").unwrap_or(text.len());
    let text = &text[..end];
    text.strip_suffix("\n\nCaused by:\n")
        .unwrap_or(text)
        .trim_end()
}

/// componentize-py in its virtual environment under `cache`, installed there first if missing.
fn componentize_py(cache: &Path) -> anyhow::Result<PathBuf> {
    let venv = cache.join("tools").join(COMPONENTIZE_PY.replace("==", "-"));
    let bin = venv.join("bin").join("componentize-py");
    if bin.exists() {
        return Ok(bin);
    }
    eprintln!(
        "weir: installing {COMPONENTIZE_PY} into {} (once)",
        venv.display()
    );
    run(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        "creating a Python virtual environment (is python3 with venv installed? on Debian: \
         apt-get install python3-venv)",
    )?;
    run(
        Command::new(venv.join("bin").join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            COMPONENTIZE_PY,
        ]),
        "installing componentize-py with pip",
    )?;
    Ok(bin)
}

/// What `weir build` builds: a project directory, or one module (a `.py` or `.js` file).
struct Project {
    lang: Lang,
    dir: PathBuf,
    /// The component's name: the crate's, or the module's.
    name: String,
    /// A JavaScript project's module (its default export is the operator).
    module: Option<PathBuf>,
}

/// The directory `path` is in (`.` for a bare file name).
fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// The project at `path`, with the Python module `module` if given.
fn project(path: &Path, module: Option<&str>) -> anyhow::Result<Project> {
    let meta = std::fs::metadata(path).with_context(|| {
        format!(
            "cannot read {}: give a project directory, or a .py, .js or .ts file",
            path.display()
        )
    })?;
    if meta.is_file() {
        let stem = path.file_stem().and_then(|s| s.to_str());
        return match (path.extension().and_then(|e| e.to_str()), stem) {
            (Some("py"), Some(stem)) => Ok(Project {
                lang: Lang::Python,
                dir: parent_of(path),
                name: module.unwrap_or(stem).to_string(),
                module: None,
            }),
            // esbuild drops TypeScript's types as it bundles (it does not check them).
            (Some("js" | "mjs" | "ts" | "mts"), Some(stem)) => Ok(Project {
                lang: Lang::Js,
                dir: parent_of(path),
                name: stem.to_string(),
                module: Some(path.to_path_buf()),
            }),
            _ => bail!(
                "{} is not a project: give a directory with a Cargo.toml, a pyproject.toml or \
                 a package.json, or a Python (.py), JavaScript (.js) or TypeScript (.ts) module",
                path.display()
            ),
        };
    }
    if path.join("Cargo.toml").exists() {
        let manifest = std::fs::read_to_string(path.join("Cargo.toml"))?;
        let table: toml::Table = toml::from_str(&manifest)
            .with_context(|| format!("{} is not valid TOML", path.join("Cargo.toml").display()))?;
        let name = table
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
            .with_context(|| {
                format!(
                    "{} has no [package] name",
                    path.join("Cargo.toml").display()
                )
            })?;
        return Ok(Project {
            lang: Lang::Rust,
            dir: path.to_path_buf(),
            name: name.replace('-', "_"),
            module: None,
        });
    }
    if path.join("pyproject.toml").exists() {
        let text = std::fs::read_to_string(path.join("pyproject.toml"))?;
        let table: toml::Table = toml::from_str(&text).with_context(|| {
            format!(
                "{} is not valid TOML",
                path.join("pyproject.toml").display()
            )
        })?;
        let configured = table
            .get("tool")
            .and_then(|t| t.get("weir"))
            .and_then(|w| w.get("module"))
            .and_then(|m| m.as_str());
        let Some(name) = module.or(configured) else {
            bail!(
                "{}: which module is the operator? Set `module` under [tool.weir] in \
                 pyproject.toml, or give --module",
                path.display()
            );
        };
        return Ok(Project {
            lang: Lang::Python,
            dir: path.to_path_buf(),
            name: name.to_string(),
            module: None,
        });
    }
    if path.join("package.json").exists() {
        let manifest = path.join("package.json");
        let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest)?)
            .with_context(|| format!("{} is not valid JSON", manifest.display()))?;
        let configured = json["weir"]["module"].as_str().or(json["main"].as_str());
        let Some(file) = module.or(configured) else {
            bail!(
                "{}: which module is the operator? Set \"weir\": {{\"module\": \"op.js\"}} in \
                 package.json, or give --module",
                path.display()
            );
        };
        let file = path.join(file);
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("operator");
        return Ok(Project {
            lang: Lang::Js,
            dir: path.to_path_buf(),
            name: name.to_string(),
            module: Some(file),
        });
    }
    bail!(
        "{} has no Cargo.toml (Rust), pyproject.toml (Python) or package.json (JavaScript, \
         TypeScript); `weir new --lang rust|python|js|ts NAME` makes a project",
        path.display()
    )
}

/// `weir build`: builds the project at `path` into `out` (default `<project>/build/<name>.wasm`),
/// then loads it as a job would (checking it against the world, compiling it into the cache)
/// and instantiates it once; reports sizes and times.
pub(super) fn build(
    path: &Path,
    module: Option<&str>,
    out: Option<&Path>,
    cache: &Path,
    engine: &WasmEngine,
) -> anyhow::Result<PathBuf> {
    let project = project(path, module)?;
    let out = match out {
        Some(o) => o.to_path_buf(),
        None => project
            .dir
            .join("build")
            .join(format!("{}.wasm", project.name)),
    };
    if let Some(parent) = out.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let started = Instant::now();
    match project.lang {
        Lang::Rust => build_rust(&project, &out)?,
        Lang::Python => build_python(&project, &out, cache)?,
        Lang::Js | Lang::Ts => build_js(&project, &out, cache)?,
    }
    let built = started.elapsed();
    let size = std::fs::metadata(&out)?.len();
    let started = Instant::now();
    let component = engine.load(&out, &Limits::default()).with_context(|| {
        format!(
            "the built component {} is not a weir operator",
            out.display()
        )
    })?;
    let compiled = started.elapsed();
    let instantiated = component
        .instantiate_once()
        .with_context(|| format!("the built component {} does not instantiate", out.display()))?;
    println!(
        "built {} ({:.1} MB, {} in {:.1} s); compiled in {:.2} s (cached for jobs), \
         instantiates in {:.2} ms",
        out.display(),
        size as f64 / 1e6,
        match project.lang {
            Lang::Rust => "cargo",
            Lang::Python => "componentize-py",
            Lang::Js | Lang::Ts => "esbuild and componentize-js",
        },
        built.as_secs_f64(),
        compiled.as_secs_f64(),
        instantiated.as_secs_f64() * 1e3,
    );
    Ok(out)
}

fn build_rust(project: &Project, out: &Path) -> anyhow::Result<()> {
    const TARGET: &str = "wasm32-wasip2";
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .context("cannot run rustup (Rust projects build with rustup's toolchain)")?;
    if !String::from_utf8_lossy(&installed.stdout)
        .lines()
        .any(|l| l.trim() == TARGET)
    {
        eprintln!("weir: installing the {TARGET} target with rustup (once)");
        run(
            Command::new("rustup").args(["target", "add", TARGET]),
            "rustup target add",
        )?;
    }
    // Cargo runs in the project's directory, so that its `.cargo/config.toml` applies (the
    // template's sets the flags operators are measured with).
    let meta = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(&project.dir)
        .output()
        .context("cannot run cargo")?;
    if !meta.status.success() {
        bail!(
            "cargo metadata failed:\n{}",
            String::from_utf8_lossy(&meta.stderr)
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&meta.stdout)?;
    let target_dir = meta["target_directory"]
        .as_str()
        .context("cargo metadata gave no target_directory")?;
    let status = Command::new("cargo")
        .args(["build", "--release", "--target", TARGET])
        .current_dir(&project.dir)
        .status()
        .context("cannot run cargo")?;
    if !status.success() {
        bail!("cargo build failed ({status})");
    }
    let built = Path::new(target_dir)
        .join(TARGET)
        .join("release")
        .join(format!("{}.wasm", project.name));
    std::fs::copy(&built, out).with_context(|| {
        format!(
            "cannot copy {} to {} (is the crate a cdylib?)",
            built.display(),
            out.display()
        )
    })?;
    Ok(())
}

fn build_python(project: &Project, out: &Path, cache: &Path) -> anyhow::Result<()> {
    if !project.dir.join(format!("{}.py", project.name)).exists()
        && !project.dir.join(&project.name).join("__init__.py").exists()
    {
        bail!(
            "no Python module {:?} in {}",
            project.name,
            project.dir.display()
        );
    }
    let tool = componentize_py(cache)?;
    let sdk = python_sdk(cache)?;
    let wit = materialize(cache, "wit", &[("stream.wit", WIT)])?;
    let mut command = Command::new(tool);
    command
        .arg("-d")
        .arg(&wit)
        .args(["-w", "processor", "componentize"])
        .arg(&project.name)
        .arg("-p")
        .arg(&project.dir)
        .arg("-p")
        .arg(&sdk);
    // Pure-Python packages of the project's virtual environment go into the component too.
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        for site in glob_site_packages(Path::new(&venv)) {
            command.arg("-p").arg(site);
        }
    }
    command.arg("-o").arg(out);
    run(&mut command, "componentize-py").map_err(|e| {
        if e.to_string().contains("has no attribute 'Operator'") {
            e.context(format!(
                "module {:?} exports no operator: end it with `Operator = weir.export(YourOperator)`",
                project.name
            ))
        } else {
            e
        }
    })
}

fn build_js(project: &Project, out: &Path, cache: &Path) -> anyhow::Result<()> {
    let module = project
        .module
        .as_ref()
        .expect("a JavaScript project names its module");
    if !module.exists() {
        bail!("no JavaScript module {}", module.display());
    }
    let tools = js_tools(cache)?;
    let sdk = js_sdk(cache)?;
    let wit = materialize(cache, "wit", &[("stream.wit", WIT)])?;
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    run(
        Command::new("node")
            .arg(tools.join("build.mjs"))
            .arg(absolute(module))
            .arg(sdk.join("node_modules"))
            .arg(&wit)
            .arg(absolute(out))
            .current_dir(&tools),
        "esbuild and componentize-js",
    )
}

/// `<venv>/lib/python3.*/site-packages`.
fn glob_site_packages(venv: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(venv.join("lib")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path().join("site-packages"))
        .filter(|p| p.is_dir())
        .collect()
}

/// `weir new`: a project `name` in `parent` with an operator, its test and a job spec.
pub(super) fn new_project(
    lang: Lang,
    name: &str,
    parent: &Path,
    cache: &Path,
) -> anyhow::Result<()> {
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if !valid {
        bail!(
            "{name:?} cannot name an operator project: use letters, digits and _, not starting \
             with a digit (it becomes a crate or module name)"
        );
    }
    if matches!(lang, Lang::Python) && name == "weir" {
        bail!(
            "\"weir\" cannot name a Python operator project: its module would hide the SDK's \
             module `weir`; choose another name"
        );
    }
    let dir = parent.join(name);
    if dir.exists() {
        bail!(
            "{} exists already; choose another name or remove it",
            dir.display()
        );
    }
    let files: Vec<(String, String)> = match lang {
        Lang::Rust => {
            let Some(sdk) = rust_sdk_dir() else {
                bail!(
                    "the Rust SDK (guest-sdk/ of weir's repository) is not where this weir was \
                     built from; run `weir new` from a weir built from a checkout"
                );
            };
            rust_template(name, &sdk)
        }
        Lang::Python => python_template(name),
        Lang::Js => js_template(name, &js_sdk(cache)?),
        Lang::Ts => ts_template(name, &js_sdk(cache)?),
    };
    for (path, text) in &files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().expect("a file has a parent"))?;
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    }
    let language = match lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
        Lang::Ts => "TypeScript",
    };
    println!(
        "created {} ({language} operator \"{name}\"); next:",
        dir.display()
    );
    let dir = dir.display();
    let mut steps: Vec<(String, &str)> = match lang {
        Lang::Rust => vec![(
            format!("cargo test --manifest-path {dir}/Cargo.toml"),
            "its unit test",
        )],
        Lang::Python => vec![
            (
                format!("python3 -m venv {dir}/.venv"),
                "a virtual environment, for the test",
            ),
            (
                format!(
                    "{dir}/.venv/bin/pip install {} pytest",
                    python_sdk(cache)?.display()
                ),
                "the SDK",
            ),
            (
                format!("{dir}/.venv/bin/python -m pytest {dir}"),
                "its unit test",
            ),
        ],
        Lang::Js | Lang::Ts => vec![
            (
                format!("npm install --prefix {dir}"),
                "the SDK, for the test",
            ),
            (format!("npm test --prefix {dir}"), "its unit test"),
        ],
    };
    steps.push((
        format!("weir build {dir}"),
        "the component, build/<name>.wasm",
    ));
    steps.push((format!("weir run {dir}/job.toml"), "the job"));
    let width = steps.iter().map(|(c, _)| c.len()).max().unwrap_or(0);
    for (command, what) in steps {
        println!("  {command:<width$}  # {what}");
    }
    Ok(())
}

const JOB_TEMPLATE: &str = r#"# Generated words, keyed by themselves, counted by the operator; the counts are printed.
[job]
name = "NAME"
parallelism = 2

[[source]]
name = "words"
type = "generator"
mode = "keyed_words"
vocabulary = 20
count = 1000

[[operator]]
name = "NAME"
uid = "NAME"
wasm = "build/NAME.wasm"
input = "words"
edge = "key_by"

[[sink]]
name = "out"
type = "print"
input = "NAME"
format = "key_value"
"#;

fn rust_template(name: &str, sdk: &Path) -> Vec<(String, String)> {
    let cargo = format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
weir-sdk = {{ path = {sdk:?} }}

[profile.release]
lto = true
codegen-units = 1
strip = true

# Not part of an enclosing workspace.
[workspace]
"#,
        sdk = sdk.display().to_string()
    );
    let lib = r#"//! A keyed count: each record's key is counted in a value state, and the new count emitted.

use weir_sdk::prelude::*;

#[derive(Default)]
pub struct Count {
    count: ValueStateHandle<u64>,
}

impl Operator for Count {
    // States are declared once here and bound to the current key with `ctx.state`
    // (`ctx.value_state("count")` in `process` works too, looked up by name every time).
    fn open(&mut self, ctx: &mut OpenContext) -> Result<()> {
        self.count = ctx.value_state("count")?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut Context, record: Record<'_>) -> Result<()> {
        let count = ctx.state(&self.count);
        let n = count.get()?.unwrap_or(0) + 1;
        count.set(&n)?;
        ctx.emit_display(record.key(), n)
    }
}

weir_sdk::export!(Count);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::Harness;

    #[test]
    fn counts_per_key() {
        let mut h = Harness::<Count>::new();
        let out = h.process([("a", "x"), ("b", "y"), ("a", "z")]);
        let counts: Vec<&str> = out.iter().map(|o| o.value_str()).collect();
        assert_eq!(counts, ["1", "1", "2"]);
        assert_eq!(h.value_state::<u64>("count", "a"), Some(2));
    }
}
"#;
    vec![
        ("Cargo.toml".into(), cargo),
        ("src/lib.rs".into(), lib.into()),
        ("job.toml".into(), JOB_TEMPLATE.replace("NAME", name)),
        (".cargo/config.toml".into(), RUST_CARGO_CONFIG.into()),
        (".gitignore".into(), "/target\n/build\n".into()),
    ]
}

/// The Rust template's cargo configuration: the flags weir's own operators are built and
/// measured with (the repository's `.cargo/config.toml` has the same).
const RUST_CARGO_CONFIG: &str = r#"# LLVM inlines more than by default (a threshold of 225) before the code becomes WebAssembly:
# every call left in a component is a real call in wasmtime, with a check of the call
# deadline at its entry. weir's account scorer and top-N run 7 % fewer instructions per
# record with it, the word count under 1 % (README, Performance); components grow by up to 90 %.
# It also unrolls loops whose trip count is known only at run time, those with early exits
# too (a search over bytes): wasmtime checks the deadline at every loop back-edge. The word
# count's split runs 15 % fewer instructions per word, the account scorer 2.6 % fewer per
# record; components grow by under 1 %.
[target.wasm32-wasip2]
rustflags = [
    "-Cllvm-args=-inline-threshold=2000",
    "-Cllvm-args=-unroll-runtime",
    "-Cllvm-args=-unroll-runtime-multi-exit",
]
"#;

fn python_template(name: &str) -> Vec<(String, String)> {
    let pyproject = format!(
        r#"[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = []

[tool.weir]
module = "{name}"
"#
    );
    let module = r#""""A keyed count: each record's key is counted in a value state, and the new count emitted."""

import weir


class Count(weir.Operator):
    def open(self, ctx):
        # Declared once, as Flink's state descriptors are; in process the handle acts on the
        # current record's key (`ctx.value_state("count")` in process works too).
        self.count = ctx.value_state("count")

    def process(self, ctx, record):
        n = self.count.get(0) + 1
        self.count.set(n)
        ctx.emit(record.key, n)


Operator = weir.export(Count)
"#;
    let test = format!(
        r#"from weir.testing import Harness

from {name} import Count


def test_counts_per_key():
    h = Harness(Count)
    out = h.process([("a", "x"), ("b", "y"), ("a", "z")])
    assert [o.value_str for o in out] == ["1", "1", "2"]
    assert h.value_state("count", "a") == 2
"#
    );
    vec![
        ("pyproject.toml".into(), pyproject),
        (format!("{name}.py"), module.into()),
        (format!("test_{name}.py"), test),
        ("job.toml".into(), JOB_TEMPLATE.replace("NAME", name)),
        (".gitignore".into(), "/build\n__pycache__/\n".into()),
    ]
}

fn js_template(name: &str, sdk: &Path) -> Vec<(String, String)> {
    let package = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "weir": { "module": format!("{name}.js") },
        "scripts": { "test": "node --test" },
        "devDependencies": {
            "weir-sdk": sdk_dependency(sdk)
        }
    });
    let module = r#"// A keyed count: each record's key is counted in a value state, and the new count emitted.
import * as weir from "weir-sdk";

export default class Count extends weir.Operator {
  open(ctx) {
    // Declared once, as Flink's state descriptors are; in process the handle acts on the
    // current record's key (ctx.valueState("count") in process works too).
    this.count = ctx.valueState("count");
  }
  process(ctx, record) {
    const n = this.count.get(0) + 1;
    this.count.set(n);
    ctx.emit(record.key, n);
  }
}
"#;
    vec![
        ("package.json".into(), json_file(&package)),
        (format!("{name}.js"), module.into()),
        (format!("{name}.test.js"), js_test(name)),
        ("job.toml".into(), JOB_TEMPLATE.replace("NAME", name)),
        (".gitignore".into(), "/build\n/node_modules\n".into()),
    ]
}

/// The JavaScript and TypeScript templates' dependency on the SDK `weir build` wrote into
/// its cache (`sdk`, see [`js_sdk`]).
fn sdk_dependency(sdk: &Path) -> String {
    format!("file:{}", sdk.join("node_modules/weir-sdk").display())
}

/// `value` as a template's JSON file.
fn json_file(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON") + "\n"
}

/// The unit test of the JavaScript and TypeScript templates' operator (TypeScript as it is).
fn js_test(name: &str) -> String {
    format!(
        r#"import assert from "node:assert/strict";
import {{ test }} from "node:test";
import {{ Harness }} from "weir-sdk/testing";

import Count from "./{name}.js";

test("counts per key", () => {{
  const h = new Harness(Count);
  const out = h.process([["a", "x"], ["b", "y"], ["a", "z"]]);
  assert.deepEqual(out.map((o) => o.valueStr), ["1", "1", "2"]);
  assert.equal(h.valueState("count", "a"), 2);
}});
"#
    )
}

/// The TypeScript operator `weir new --lang ts` makes: the JavaScript one with types, and a
/// test that `npm test` type-checks (`tsc`, against the SDK's declarations) and runs.
fn ts_template(name: &str, sdk: &Path) -> Vec<(String, String)> {
    let package = serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "private": true,
        "type": "module",
        "weir": { "module": format!("{name}.ts") },
        // tsc checks the operator without Node's types (a component has no Node: `Buffer`
        // would pass the test and fail in the job), then the test with them, and writes both
        // as JavaScript for node's test runner (Node 20 does not run TypeScript itself).
        "scripts": {
            "test": "tsc && tsc -p tsconfig.test.json && node --test build/test/*.test.js"
        },
        "devDependencies": {
            "@types/node": "^20.19.0",
            "typescript": "~6.0.3",
            "weir-sdk": sdk_dependency(sdk)
        }
    });
    let tsconfig = serde_json::json!({
        "compilerOptions": {
            "strict": true,
            "target": "es2022",
            "module": "esnext",
            "moduleResolution": "bundler",
            "noImplicitOverride": true,
            "outDir": "build/test",
            "types": []
        },
        "files": [format!("{name}.ts")]
    });
    let test_config = serde_json::json!({
        "extends": "./tsconfig.json",
        "compilerOptions": { "types": ["node"] },
        "files": [format!("{name}.test.ts")]
    });
    let module = r#"// A keyed count: each record's key is counted in a value state, and the new count emitted.
import * as weir from "weir-sdk";

export default class Count extends weir.Operator {
  private count!: weir.ValueState<number>;

  override open(ctx: weir.OpenContext): void {
    // Declared once, as Flink's state descriptors are; in process the handle acts on the
    // current record's key (ctx.valueState("count") in process works too).
    this.count = ctx.valueState<number>("count");
  }

  override process(ctx: weir.Context, record: weir.Record): void {
    const n = (this.count.get(0) ?? 0) + 1;
    this.count.set(n);
    ctx.emit(record.key, n);
  }
}
"#;
    vec![
        ("package.json".into(), json_file(&package)),
        ("tsconfig.json".into(), json_file(&tsconfig)),
        ("tsconfig.test.json".into(), json_file(&test_config)),
        (format!("{name}.ts"), module.into()),
        (format!("{name}.test.ts"), js_test(name)),
        ("job.toml".into(), JOB_TEMPLATE.replace("NAME", name)),
        (".gitignore".into(), "/build\n/node_modules\n".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::{JS_SDK, PYTHON_SDK, RUST_CARGO_CONFIG};

    fn guest_rustflags(config: &str) -> toml::Value {
        let config: toml::Table = toml::from_str(config).expect("valid TOML");
        config["target"]["wasm32-wasip2"]["rustflags"].clone()
    }

    /// Projects from `weir new` build with the flags weir's own operators are measured with.
    #[test]
    fn the_rust_template_has_the_repositorys_guest_flags() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../.cargo/config.toml");
        let repo = std::fs::read_to_string(path).expect("the repository's cargo config");
        assert_eq!(guest_rustflags(RUST_CARGO_CONFIG), guest_rustflags(&repo));
    }

    /// Every module of the Python and JavaScript SDKs goes into the components `weir build`
    /// makes: one left out fails only at the import, in a built component.
    #[test]
    fn the_embedded_sdks_hold_every_module() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk");
        for (dir, under, ext, files) in [
            ("python/weir", "weir", "py", PYTHON_SDK),
            ("js/src", "src", "js", JS_SDK),
        ] {
            let mut on_disk: Vec<String> = std::fs::read_dir(format!("{root}/{dir}"))
                .expect("the SDK's directory")
                .map(|e| e.expect("a directory entry").file_name())
                .map(|n| n.to_string_lossy().into_owned())
                .filter(|n| n.ends_with(&format!(".{ext}")))
                .map(|n| format!("{under}/{n}"))
                .collect();
            on_disk.sort();
            let mut embedded: Vec<String> = (files.iter())
                .map(|(path, _)| path.to_string())
                .filter(|p| p.starts_with(&format!("{under}/")))
                .collect();
            embedded.sort();
            assert_eq!(embedded, on_disk, "{dir}");
        }
    }
}
