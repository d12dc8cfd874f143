//! The `weir` command line: `run` a job locally, `validate` a job spec.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
