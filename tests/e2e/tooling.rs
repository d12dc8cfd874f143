//! `weir new` and `weir build`: a new project in each language passes its own test, builds
//! into a component, and its job runs.

use std::path::Path;
use std::process::{Command, Output};

use crate::support::{Workspace, release_dir, weir_bin};

/// `weir --cache-dir <shared> ARGS` in `dir`; panics with its output unless it succeeds.
fn weir_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(weir_bin())
        .arg("--cache-dir")
        .arg(release_dir().join("e2e-component-cache"))
        .args(args)
        .current_dir(dir)
        .env_remove("WEIR_LOG")
        .output()
        .expect("start weir");
    let text = stdout_and_stderr(&out);
    assert!(out.status.success(), "weir {args:?} failed:\n{text}");
    text
}

/// What a finished command wrote, its standard output then its standard error.
fn stdout_and_stderr(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The counts the generated job printed (`<subtask>> key<TAB>count` lines): the last count
/// per key, which must add up to the generator's 1,000 records.
fn total_of_last_counts(output: &str) -> u64 {
    let mut last = std::collections::HashMap::new();
    for line in output.lines() {
        if let Some((_, kv)) = line.split_once("> ")
            && let Some((key, n)) = kv.split_once('\t')
        {
            let n: u64 = n.parse().expect("a count");
            let e = last.entry(key.to_owned()).or_insert(0);
            *e = n.max(*e);
        }
    }
    last.values().sum()
}

#[test]
fn a_new_python_project_tests_builds_and_runs() {
    let ws = Workspace::new();
    let made = weir_in(ws.dir(), &["new", "--lang", "python", "clicks"]);
    assert!(made.contains("python -m pytest"), "{made}");
    // Its test passes, with the SDK on the path.
    let python = release_dir().join("../pytest-venv/bin/python");
    assert!(python.exists(), "no pytest: run `cargo xtask pytest` first");
    let out = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "clicks"])
        .env(
            "PYTHONPATH",
            crate::support::repo().join("guest-sdk/python"),
        )
        .current_dir(ws.dir())
        .output()
        .expect("run pytest");
    assert!(out.status.success(), "{}", stdout_and_stderr(&out));
    let built = builds_and_runs(&ws, "clicks");
    assert!(built.contains("instantiates in"), "{built}");
}

/// `npm ARGS` in `dir`: its output, or a failure with it.
fn npm(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("npm")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run npm");
    let all = stdout_and_stderr(&out);
    match out.status.success() {
        true => Ok(all),
        false => Err(format!("npm {args:?}:\n{all}")),
    }
}

/// `npm test` in `dir` after `npm install` (which links the SDK from weir's cache
/// directory); panics with npm's output unless both pass.
fn npm_install_and_test(dir: &Path) -> String {
    npm(dir, &["install", "--no-audit", "--no-fund"])
        .and_then(|_| npm(dir, &["test"]))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `weir build NAME` and `weir run NAME` (the project's directory stands for its job.toml)
/// in `ws`: checks that the build wrote `NAME/build/NAME.wasm` and that the job counted the
/// generator's 1,000 records; returns the build's output.
fn builds_and_runs(ws: &Workspace, name: &str) -> String {
    let built = weir_in(ws.dir(), &["build", name]);
    assert!(
        built.contains(&format!("{name}/build/{name}.wasm")),
        "{built}"
    );
    let ran = weir_in(ws.dir(), &["run", "--no-progress", name]);
    assert_eq!(total_of_last_counts(&ran), 1000, "{ran}");
    built
}

#[test]
fn a_new_typescript_project_type_checks_tests_builds_and_runs() {
    let ws = Workspace::new();
    let made = weir_in(ws.dir(), &["new", "--lang", "ts", "clicks"]);
    assert!(made.contains("npm test"), "{made}");
    // npm installs TypeScript; its test is type-checked against the SDK's declarations.
    let tested = npm_install_and_test(&ws.path("clicks"));
    assert!(tested.contains("# pass 1"), "{tested}");
    builds_and_runs(&ws, "clicks");

    // tsc fails the test on a state written with a value of another type than declared,
    // and on Node's `Buffer` in the operator (a component has no Node), not in the test.
    let module = ws.path("clicks/clicks.ts");
    let code = std::fs::read_to_string(&module).unwrap();
    for (wrong, error) in [
        ("this.count.set(String(n))", "error TS2345"),
        ("this.count.set(Buffer.from([n]).length)", "error TS2591"),
    ] {
        let changed = code.replace("this.count.set(n)", wrong);
        assert_ne!(changed, code);
        std::fs::write(&module, changed).unwrap();
        let failed = npm(&ws.path("clicks"), &["test"]).unwrap_err();
        assert!(failed.contains(error), "{failed}");
    }
}

#[test]
fn a_new_javascript_project_tests_builds_and_runs() {
    let ws = Workspace::new();
    let made = weir_in(ws.dir(), &["new", "--lang", "js", "clicks"]);
    assert!(made.contains("npm test"), "{made}");
    npm_install_and_test(&ws.path("clicks"));
    builds_and_runs(&ws, "clicks");

    // A project with a copy of the SDK of its own (installed from a registry, say), whose
    // operator passes the SDK's objects (a `Ttl`) to it: the component has one SDK.
    let own = ws.path("clicks/node_modules/weir-sdk");
    std::fs::remove_file(&own).expect("npm linked the SDK");
    let sdk = crate::support::repo().join("guest-sdk/js");
    for dir in ["", "src"] {
        std::fs::create_dir_all(own.join(dir)).unwrap();
    }
    for file in ["package.json", "index.d.ts", "testing.d.ts"] {
        std::fs::copy(sdk.join(file), own.join(file)).unwrap();
    }
    for entry in std::fs::read_dir(sdk.join("src")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, own.join("src").join(path.file_name().unwrap())).unwrap();
    }
    let module = ws.path("clicks/clicks.js");
    let code = std::fs::read_to_string(&module).unwrap().replace(
        r#"ctx.valueState("count")"#,
        r#"ctx.valueState("count", new weir.Ttl(3_600_000))"#,
    );
    assert!(code.contains("weir.Ttl"), "{code}");
    std::fs::write(&module, code).unwrap();
    builds_and_runs(&ws, "clicks");
}

#[test]
fn a_new_rust_project_builds_and_runs() {
    let ws = Workspace::new();
    weir_in(ws.dir(), &["new", "--lang", "rust", "counter"]);
    let build = |target: &Path| {
        Command::new(weir_bin())
            .args(["--cache-dir"])
            .arg(release_dir().join("e2e-component-cache"))
            .args(["build", "counter"])
            .env("CARGO_TARGET_DIR", target)
            .current_dir(ws.dir())
            .output()
            .expect("start weir")
    };
    // The project's own target directory, shared by CI runs.
    let out = build(&release_dir().join("../weir-new-target"));
    assert!(out.status.success(), "{}", stdout_and_stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("counter/build/counter.wasm"), "{text}");
    let ran = weir_in(ws.dir(), &["run", "--no-progress", "counter/job.toml"]);
    assert_eq!(total_of_last_counts(&ran), 1000, "{ran}");

    // The build takes the project's cargo configuration (the template's sets its flags),
    // although weir runs in another directory: a flag rustc rejects fails it.
    let config = ws.path("counter/.cargo/config.toml");
    let flags = std::fs::read_to_string(&config).expect("the template's cargo config");
    assert!(flags.contains("inline-threshold"), "{flags}");
    std::fs::write(
        &config,
        "[target.wasm32-wasip2]\nrustflags = [\"-Cno-such-flag\"]\n",
    )
    .unwrap();
    let out = build(&ws.path("bad-flags-target"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "built with a bad flag: {err}");
    assert!(err.contains("no-such-flag"), "{err}");
}

#[test]
fn build_and_new_refuse_what_they_cannot_use_naming_the_fix() {
    let ws = Workspace::new();
    let fails = |args: &[&str]| {
        let out = Command::new(weir_bin())
            .arg("--cache-dir")
            .arg(release_dir().join("e2e-component-cache"))
            .args(args)
            .current_dir(ws.dir())
            .output()
            .expect("start weir");
        assert!(!out.status.success(), "weir {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(fails(&["new", "--lang", "python", "9lives"]).contains("letters, digits and _"));
    std::fs::create_dir(ws.path("empty")).unwrap();
    assert!(fails(&["build", "empty"]).contains("weir new --lang"));
    // A module that does not export an operator, and one that fails as it is imported.
    ws.write("plain.py", "x = 1\n");
    let err = fails(&["build", "plain.py"]);
    assert!(err.contains("Operator = weir.export("), "{err}");
    ws.write(
        "broken.py",
        "import weir\nraise RuntimeError('no config')\n",
    );
    let err = fails(&["build", "broken.py"]);
    assert!(err.contains("no config"), "{err}");
}
