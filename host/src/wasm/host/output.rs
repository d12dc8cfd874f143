//! `weir:stream/output`: what the guest emits, to the main output and to side outputs.

use weir_wire::OutputReader;

use super::{Hook, HostState, check_name, quoted};
use crate::batch::Batch;
use crate::wasm::limits::{Limit, LimitExceeded, bytes};
use crate::wasm::weir::stream::output;

impl output::Host for HostState {
    fn emit(&mut self, records: Vec<u8>) -> wasmtime::Result<()> {
        if !self.in_call {
            return Err(wasmtime::format_err!(
                "records were emitted outside of process, on-timers or close"
            ));
        }
        if self.hook == Hook::WriteBack {
            return Err(wasmtime::format_err!(
                "records were emitted during the write-back of state before a checkpoint, which \
                 must only write back"
            ));
        }
        self.emitted_bytes += records.len() as u64;
        let limit = self.limits().output_bytes.as_u64();
        if self.emitted_bytes > limit {
            return Err(LimitExceeded::error(
                Limit::OutputBytes,
                format!(
                    "{} emitted more than {} in one call",
                    self.hook,
                    bytes(limit)
                ),
            ));
        }
        // A batch addresses its bytes with u32 offsets.
        if self.out.bytes() + records.len() > u32::MAX as usize {
            return Err(wasmtime::format_err!(
                "the operator emitted more than 4 GiB in one call; emit less per record or batch"
            ));
        }
        let before = self.out.len();
        let side = self
            .out
            .extend_from_output(&records)
            .map_err(|e| wasmtime::format_err!("{e}"))?;
        self.emitted_records += (self.out.len() - before) as u64 + side;
        let limit = self.limits().output_records;
        if self.emitted_records > limit {
            return Err(LimitExceeded::error(
                Limit::OutputRecords,
                format!(
                    "{} emitted more than {limit} records in one call",
                    self.hook
                ),
            ));
        }
        if side > 0 {
            // The buffer decoded whole above; now pick out its side-output records.
            for (name, rec) in OutputReader::new(&records).flatten() {
                let Some(name) = name else { continue };
                let at = match self.side_index.get(name) {
                    Some(&at) => at,
                    None => self.add_side_output(name)?,
                };
                self.side_outputs[at].1.push(&rec);
            }
        }
        Ok(())
    }
}

impl HostState {
    /// Starts side output `name`, within the `side_outputs` limit.
    fn add_side_output(&mut self, name: &[u8]) -> wasmtime::Result<usize> {
        check_name("side output", name)?;
        let limit = self.limits().side_outputs;
        if self.side_outputs.len() as u64 >= limit {
            return Err(LimitExceeded::error(
                Limit::SideOutputs,
                format!(
                    "{} emitted to more than {limit} side outputs (the next: {})",
                    self.hook,
                    quoted(&String::from_utf8_lossy(name))
                ),
            ));
        }
        let name = std::str::from_utf8(name).expect("check_name checked it");
        self.side_outputs.push((name.to_owned(), Batch::default()));
        self.side_index
            .insert(name.as_bytes().into(), self.side_outputs.len() - 1);
        Ok(self.side_outputs.len() - 1)
    }

    /// The records emitted to side outputs by the last call, by side output name.
    pub(crate) fn take_side_outputs(&mut self) -> Vec<(String, Batch)> {
        self.side_outputs
            .iter_mut()
            .filter(|(_, batch)| !batch.is_empty())
            .map(|(name, batch)| (name.clone(), std::mem::take(batch)))
            .collect()
    }
}
