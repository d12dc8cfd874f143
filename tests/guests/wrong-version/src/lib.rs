//! Test guest: exports `weir:stream/operator@0.9.0` instead of this host's version, which the host must
//! refuse with an error naming the versions.

// The export glue is `unsafe` canonical-ABI code that wit-bindgen generates.
#[allow(unsafe_code, missing_docs)]
mod component {
    wit_bindgen::generate!({
        inline: r"
            package weir:%stream@0.9.0;

            interface types {
                record open-context {
                    operator-uid: string,
                    subtask-index: u32,
                    parallelism: u32,
                    config: string,
                }
            }

            interface operator {
                use types.{open-context};

                open: func(ctx: open-context) -> result<_, string>;
                process: func(batch: list<u8>) -> result<_, string>;
                on-timers: func(timers: list<u8>) -> result<_, string>;
                close: func() -> result<_, string>;
            }

            world processor {
                export operator;
            }
        ",
        world: "processor",
    });

    use exports::weir::stream::operator::{Guest, OpenContext};

    struct WrongVersion;

    impl Guest for WrongVersion {
        fn open(_ctx: OpenContext) -> Result<(), String> {
            Ok(())
        }

        fn process(_batch: Vec<u8>) -> Result<(), String> {
            Ok(())
        }

        fn on_timers(_timers: Vec<u8>) -> Result<(), String> {
            Ok(())
        }

        fn close() -> Result<(), String> {
            Ok(())
        }
    }

    export!(WrongVersion);
}
