//! `cargo bench -p weir --bench state -- [--keys N]... [--dir DIR]`: the state-backend
//! benchmark (see `weir::bench`); `cargo xtask bench-state` runs it.

fn main() {
    let mut keys = Vec::new();
    let mut dir = std::env::temp_dir().join("weir-bench-state");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keys" => keys.push(
                args.next()
                    .and_then(|v| v.replace('_', "").parse().ok())
                    .expect("--keys takes a number"),
            ),
            "--dir" => dir = args.next().expect("--dir takes a directory").into(),
            "--bench" => {}
            other => panic!("unknown option {other}; use --keys N and --dir DIR"),
        }
    }
    if keys.is_empty() {
        keys = vec![1_000_000, 10_000_000];
    }
    if let Err(e) = weir::bench::state(&keys, &dir) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
