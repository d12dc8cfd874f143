//! Test guest: a valid component of another world than `weir:stream/processor`, which the host
//! must refuse with a clear error.

// The export glue is `unsafe` canonical-ABI code that wit-bindgen generates.
#[allow(unsafe_code, missing_docs)]
mod component {
    wit_bindgen::generate!({
        inline: "package other:thing; world thing { export run: func(); }",
        world: "thing",
    });

    struct Thing;

    impl Guest for Thing {
        fn run() {}
    }

    export!(Thing);
}
