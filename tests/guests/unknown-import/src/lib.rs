//! Test guest: a valid weir operator that also imports `acme:vault/secrets`, an interface the
//! host does not know. The host must refuse it at load time, naming the interface.

use weir_sdk::prelude::*;

#[allow(unsafe_code, missing_docs, clippy::all)]
mod vault {
    wit_bindgen::generate!({
        inline: "package acme:vault;
                 interface secrets { get: func(name: string) -> string; }
                 world client { import secrets; }",
        world: "client",
    });
}

#[derive(Default)]
struct Leaky;

impl Operator for Leaky {
    fn process(&mut self, ctx: &mut Context, rec: Record<'_>) -> Result<()> {
        let secret = vault::acme::vault::secrets::get("api-key");
        ctx.emit(rec.key(), secret)
    }
}

weir_sdk::export!(Leaky);
