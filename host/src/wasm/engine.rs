//! The wasmtime engine, the compiled-component cache and validation of `.wasm` files.
//!
//! Compiling a component takes 90-150 ms for a small Rust guest (seconds for Python or JS
//! guests); loading a precompiled one takes well under a millisecond. Components are therefore
//! compiled once per content hash and engine configuration and kept as `.cwasm` files in a
//! cache directory, and once per process in memory.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, HasSelf, Linker, ResourceType};
use wasmtime::{Config, Engine};

use super::capabilities::Grants;
use super::host::HostState;
use super::limits::{Limits, bytes};
use super::{Processor, ProcessorPre};

/// The WIT package version this host implements.
pub const WIT_VERSION: &str = "0.2.0";
/// The WIT world an operator component implements.
pub const WORLD: &str = "weir:stream/processor@0.2.0";
const OPERATOR_EXPORT: &str = "weir:stream/operator@0.2.0";

/// A `.wasm` file that cannot be used as an operator, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// The file cannot be read.
    #[error(
        "cannot read {path}: {cause}; check the `wasm` path (relative paths start at the job spec's directory), or build the operator first (`weir build <project dir>`)"
    )]
    Read {
        /// The file or directory involved.
        path: PathBuf,
        /// Why it failed.
        cause: std::io::Error,
    },
    /// The file is empty.
    #[error("{path} is empty; rebuild the operator")]
    Empty {
        /// The file or directory involved.
        path: PathBuf,
    },
    /// The file is not WebAssembly.
    #[error(
        "{path} is not a WebAssembly file (it does not start with \"\\0asm\"); name the component the \
         operator's build made (`weir build <project dir>` writes build/<name>.wasm; for a Rust \
         crate, `cargo build --release --target wasm32-wasip2`)"
    )]
    NotWasm {
        /// The file or directory involved.
        path: PathBuf,
    },
    /// The file is a core module, not a component.
    #[error(
        "{path} is a core WebAssembly module, not a component; build it for the wasm32-wasip2 target \
         (`cargo build --release --target wasm32-wasip2`) or wrap it with `wasm-tools component new`"
    )]
    CoreModule {
        /// The file or directory involved.
        path: PathBuf,
    },
    /// The component does not validate or compile.
    #[error("{path} is not a valid component: {message}")]
    Invalid {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong, in the words of the check that failed.
        message: String,
    },
    /// The component is built for another version of the contract.
    #[error(
        "{path} targets weir:stream@{found}, but this host supports weir:stream@{WIT_VERSION}; \
         rebuild it against weir-sdk {WIT_VERSION}"
    )]
    WrongVersion {
        /// The file or directory involved.
        path: PathBuf,
        /// The version it has.
        found: String,
    },
    /// The component does not export the operator interface.
    #[error(
        "{path} is not a weir operator: it does not export {OPERATOR_EXPORT} (its exports: {exports}); \
         build it with weir-sdk and `weir_sdk::export!`"
    )]
    WrongWorld {
        /// The file or directory involved.
        path: PathBuf,
        /// What it exports.
        exports: String,
    },
    /// The component imports what this host does not provide.
    #[error(
        "{path} imports {}, which this host does not provide; operators may import only weir:stream@{WIT_VERSION} and standard WASI interfaces",
        imports.iter().map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ")
    )]
    UnknownImport {
        /// The file or directory involved.
        path: PathBuf,
        /// The imports this host does not provide.
        imports: Vec<String>,
    },
    /// The component cannot be linked.
    #[error("{path}: {message}")]
    Link {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong, in the words of the check that failed.
        message: String,
    },
    /// The file is larger than `limits.wasm_size`.
    #[error(
        "{path} is {size}, over the limit of {limit}; raise `limits.wasm_size` of the operator if \
         this is expected"
    )]
    TooLarge {
        /// The file or directory involved.
        path: PathBuf,
        /// Its size.
        size: String,
        /// The limit.
        limit: String,
    },
    /// Compiling took longer than `limits.compile_time`.
    #[error(
        "compiling {path} took longer than {limit:?}; raise `limits.compile_time` of the operator \
         if this is expected"
    )]
    CompileTimeout {
        /// The file or directory involved.
        path: PathBuf,
        /// The limit.
        limit: Duration,
    },
    /// Another component's compile held the engine's one compile slot for all of
    /// `limits.compile_time` (it may be one given up on at its own limit, which runs on).
    #[error(
        "{path} was not compiled: another component was compiling for all of {waited:?}, this \
         one's `limits.compile_time`; try again when it is done"
    )]
    CompileBusy {
        /// The file or directory involved.
        path: PathBuf,
        /// How long it waited.
        waited: Duration,
    },
    /// The engine cannot be created.
    #[error("wasmtime engine: {0}")]
    Engine(String),
}

/// A validated operator component, ready to instantiate.
#[derive(Clone)]
pub struct OperatorComponent {
    pub(crate) pre: ProcessorPre<HostState>,
    pub(crate) path: PathBuf,
    /// Whether the engine interrupts calls at their deadline.
    pub(crate) deadlines: bool,
    /// The limits of each instance.
    pub(crate) limits: Limits,
    /// What each instance may reach outside its sandbox.
    pub(crate) grants: Grants,
    /// The interfaces it imports.
    imports: Arc<[String]>,
    /// The SHA-256 of its bytes, hex: which version of an operator this is.
    sha256: Arc<str>,
}

impl OperatorComponent {
    /// The interfaces the component imports (weir's and standard WASI ones).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// The SHA-256 of the component's bytes, hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The component whose instances may reach what `grants` grants.
    pub fn with_grants(self, grants: Grants) -> Self {
        OperatorComponent { grants, ..self }
    }

    /// Instantiates the component once as a subtask would (memory state; `open` is not
    /// called) and drops the instance: how long instantiation took.
    pub fn instantiate_once(&self) -> Result<Duration, crate::operator::OperatorError> {
        let ctx = crate::operator::OperatorContext {
            job: "instantiate-once".into(),
            uid: "instantiate-once".into(),
            subtask: 0,
            parallelism: 1,
            max_parallelism: 1,
            key_groups: 0..1,
            config: "{}".into(),
            cancelled: Default::default(),
        };
        let started = std::time::Instant::now();
        let instance =
            super::operator::WasmOperator::new(self, ctx, &crate::state::StateSetup::memory())?;
        let took = started.elapsed();
        drop(instance);
        Ok(took)
    }
}

/// How the process's engine is configured.
#[derive(Debug, Clone, Copy)]
pub struct EngineOptions {
    /// Epoch interruption, which enforces `limits.call_deadline`. Off only to measure what it
    /// costs: a guest that loops forever is then never stopped.
    pub epoch_interruption: bool,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            epoch_interruption: true,
        }
    }
}

/// Standard WASI packages weir knows but does not provide: a component may import them (guest
/// toolchains add them to pure code), and any call traps, naming the function.
const DENIED_WASI: &[&str] = &[
    "wasi:http/",
    "wasi:keyvalue/",
    "wasi:config/",
    "wasi:logging/",
    "wasi:blobstore/",
    "wasi:messaging/",
];
/// Standard WASI packages weir links, with every capability denied unless granted.
const LINKED_WASI: &[&str] = &[
    "wasi:io/",
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:filesystem/",
    "wasi:sockets/",
];

impl std::fmt::Debug for OperatorComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorComponent")
            .field("path", &self.path)
            .finish()
    }
}

/// One wasmtime engine for the process, with its linker and compiled-component cache.
pub struct WasmEngine {
    engine: Engine,
    options: EngineOptions,
    linker: Linker<HostState>,
    cache_dir: Option<PathBuf>,
    fingerprint: String,
    loaded: Mutex<HashMap<[u8; 32], Component>>,
    /// Held by the thread compiling a component: one compiles at a time (wasmtime spreads
    /// each over the cores), a compile given up at its time limit included until it ends.
    compiling: Arc<CompileSlot>,
}

/// The right to compile: one compile at a time.
#[derive(Default)]
struct CompileSlot {
    busy: Mutex<bool>,
    freed: Condvar,
}

impl CompileSlot {
    /// Takes the slot, waiting at most `limit` for it; returns whether it did.
    fn take(&self, limit: Duration) -> bool {
        let busy = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut busy, _) = self
            .freed
            .wait_timeout_while(busy, limit, |busy| *busy)
            .unwrap_or_else(PoisonError::into_inner);
        !std::mem::replace(&mut *busy, true)
    }
}

/// The slot, taken: freed when dropped (a compile's end, or its thread failing to start).
struct SlotHeld(Arc<CompileSlot>);

impl Drop for SlotHeld {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(PoisonError::into_inner) = false;
        self.0.freed.notify_one();
    }
}

impl std::fmt::Debug for WasmEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEngine")
            .field("cache_dir", &self.cache_dir)
            .finish()
    }
}

impl WasmEngine {
    /// An engine that caches compiled components in `cache_dir` (none: compile every time).
    pub fn new(cache_dir: Option<PathBuf>) -> Result<Arc<WasmEngine>, WasmError> {
        Self::with_options(cache_dir, EngineOptions::default())
    }

    /// [`WasmEngine::new`] with `options`.
    pub fn with_options(
        cache_dir: Option<PathBuf>,
        options: EngineOptions,
    ) -> Result<Arc<WasmEngine>, WasmError> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        // Execution deadlines of guest calls (see `limits`).
        config.epoch_interruption(options.epoch_interruption);
        profiler(&mut config)?;
        let engine = Engine::new(&config).map_err(|e| WasmError::Engine(format!("{e:#}")))?;
        if options.epoch_interruption {
            super::limits::start_ticker(&engine)
                .map_err(|e| WasmError::Engine(format!("cannot start the epoch ticker: {e}")))?;
        }
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .and_then(|()| super::interrupt::add_to_linker(&mut linker))
            .map_err(|e| WasmError::Engine(format!("{e:#}")))?;
        Processor::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| WasmError::Engine(format!("{e:#}")))?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let fingerprint = format!("{:016x}", h.finish());
        if let Some(dir) = &cache_dir {
            remove_abandoned_writes(dir);
        }
        Ok(Arc::new(WasmEngine {
            engine,
            options,
            linker,
            cache_dir,
            fingerprint,
            loaded: Mutex::new(HashMap::new()),
            compiling: Arc::default(),
        }))
    }

    /// The default cache directory: `$WEIR_CACHE_DIR`, else `$XDG_CACHE_HOME/weir`, else
    /// `~/.cache/weir`.
    pub fn default_cache_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("WEIR_CACHE_DIR") {
            return Some(dir.into());
        }
        if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
            return Some(PathBuf::from(dir).join("weir"));
        }
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("weir"))
    }

    /// Reads, validates, compiles (or loads from the cache) and links an operator component,
    /// within the `wasm_size` and `compile_time` of `limits`.
    pub fn load(&self, path: &Path, limits: &Limits) -> Result<OperatorComponent, WasmError> {
        let read = |cause| WasmError::Read {
            path: path.to_path_buf(),
            cause,
        };
        let size = std::fs::metadata(path).map_err(read)?.len();
        let limit = limits.wasm_size.as_u64();
        if size > limit {
            // Exact figures where rounding would show the same one twice.
            let (size, limit) = match (bytes(size), bytes(limit)) {
                (s, l) if s == l => (format!("{size} bytes"), format!("{limit} bytes")),
                pair => pair,
            };
            return Err(WasmError::TooLarge {
                path: path.to_path_buf(),
                size,
                limit,
            });
        }
        let wasm = std::fs::read(path).map_err(read)?;
        check_header(path, &wasm)?;
        // Before compiling: a file that is no weir operator is not compiled (nor cached).
        let imports = check_world(path, &wasm)?;
        let hash: [u8; 32] = Sha256::digest(&wasm).into();
        let component = self.compile(path, hash, wasm, limits.compile_time)?;
        let link = |e: wasmtime::Error| WasmError::Link {
            path: path.to_path_buf(),
            message: format!("{e:#}"),
        };
        let denied = component
            .component_type()
            .imports(&self.engine)
            .any(|(name, _)| DENIED_WASI.iter().any(|p| name.starts_with(p)));
        let instance_pre = if denied {
            let mut linker = self.linker.clone();
            define_denied(&mut linker, &self.engine, &component).map_err(link)?;
            linker.instantiate_pre(&component)
        } else {
            self.linker.instantiate_pre(&component)
        }
        .map_err(link)?;
        let pre = ProcessorPre::new(instance_pre).map_err(|e| WasmError::Link {
            path: path.to_path_buf(),
            message: format!("{e:#}"),
        })?;
        Ok(OperatorComponent {
            pre,
            path: path.to_path_buf(),
            deadlines: self.options.epoch_interruption,
            limits: *limits,
            grants: Grants::default(),
            imports: imports.into(),
            sha256: hex(&hash).into(),
        })
    }

    /// Drops the compiled component whose SHA-256 is `sha256` (hex) from memory: it was
    /// deleted, and a process that runs for long must not hold every component it ever
    /// loaded. The compiled file in the cache stays (for the same bytes uploaded again).
    pub fn forget(&self, sha256: &str) {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        loaded.retain(|hash, _| hex(hash) != sha256);
    }

    fn compile(
        &self,
        path: &Path,
        hash: [u8; 32],
        wasm: Vec<u8>,
        time_limit: Duration,
    ) -> Result<Component, WasmError> {
        // The map is locked only to look and to insert: loading a component compiled before
        // does not wait for another one being compiled.
        let loaded = || self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = loaded().get(&hash) {
            return Ok(c.clone());
        }
        let cached = self
            .cache_dir
            .as_ref()
            .map(|dir| dir.join(format!("{}-{}.cwasm", hex(&hash), self.fingerprint)));
        if let Some(file) = &cached
            && file.exists()
        {
            // SAFETY: `deserialize_file` trusts its input to be a component compiled by this
            // wasmtime. The cache only holds files this function wrote (atomically, via a
            // temporary file and rename) from `precompile_component` with this engine's
            // configuration, whose compatibility hash is part of the file name; wasmtime also
            // checks the version and configuration recorded in the file.
            #[allow(unsafe_code)]
            let result = unsafe { Component::deserialize_file(&self.engine, file) };
            match result {
                Ok(c) => {
                    loaded().insert(hash, c.clone());
                    return Ok(c);
                }
                Err(e) => tracing::warn!(
                    file = %file.display(),
                    "ignoring unreadable compiled-component cache entry: {e:#}"
                ),
            }
        }
        let started = std::time::Instant::now();
        let invalid = |e: wasmtime::Error| WasmError::Invalid {
            path: path.to_path_buf(),
            message: format!("{e:#}"),
        };
        // Compile on a thread of its own, so that a component that takes too long to compile
        // fails the load at its time limit. That thread runs on to its end in the background,
        // holding the compile slot: compiles given up on do not pile up.
        if !self.compiling.take(time_limit) {
            return Err(WasmError::CompileBusy {
                path: path.to_path_buf(),
                waited: time_limit,
            });
        }
        let slot = SlotHeld(self.compiling.clone());
        let (done, result) = std::sync::mpsc::channel();
        let engine = self.engine.clone();
        std::thread::Builder::new()
            .name("wasm-compile".into())
            .spawn(move || {
                let compiled = engine.precompile_component(&wasm);
                drop(slot);
                drop(done.send(compiled));
            })
            .map_err(|e| WasmError::Engine(format!("cannot start a compile thread: {e}")))?;
        let compiled = match result.recv_timeout(time_limit) {
            Ok(compiled) => compiled.map_err(invalid)?,
            Err(_) => {
                return Err(WasmError::CompileTimeout {
                    path: path.to_path_buf(),
                    limit: time_limit,
                });
            }
        };
        if let Some(file) = &cached
            && let Err(e) = write_atomically(file, &compiled)
        {
            tracing::warn!(file = %file.display(), "cannot cache compiled component: {e}");
        }
        // SAFETY: `compiled` was produced just above by this engine.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(&self.engine, &compiled) };
        let component = component.map_err(invalid)?;
        tracing::debug!(path = %path.display(), ms = started.elapsed().as_millis() as u64, "compiled component");
        loaded().insert(hash, component.clone());
        Ok(component)
    }
}

/// `WEIR_WASM_PROFILER=perfmap` (or `jitdump`) makes wasmtime tell `perf` the names of the
/// guests' functions; a build with the `profiling` feature has the agents.
fn profiler(config: &mut Config) -> Result<(), WasmError> {
    let Ok(wanted) = std::env::var("WEIR_WASM_PROFILER") else {
        return Ok(());
    };
    #[cfg(feature = "profiling")]
    {
        let strategy = match wanted.as_str() {
            "perfmap" => wasmtime::ProfilingStrategy::PerfMap,
            "jitdump" => wasmtime::ProfilingStrategy::JitDump,
            other => {
                return Err(WasmError::Engine(format!(
                    "WEIR_WASM_PROFILER={other:?}: use perfmap or jitdump"
                )));
            }
        };
        config.profiler(strategy);
        Ok(())
    }
    #[cfg(not(feature = "profiling"))]
    {
        let _ = config;
        Err(WasmError::Engine(format!(
            "WEIR_WASM_PROFILER={wanted:?} needs a profiling build: cargo build --release -p \
             weir --features profiling"
        )))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Defines every import of `component` from a package of [`DENIED_WASI`] as functions that
/// fail the call, naming the function.
fn define_denied(
    linker: &mut Linker<HostState>,
    engine: &Engine,
    component: &Component,
) -> wasmtime::Result<()> {
    for (name, item) in component.component_type().imports(engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        if !DENIED_WASI.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let mut interface = linker.instance(name)?;
        for (export, item) in instance.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => {
                    let function = format!("{name}#{export}");
                    interface.func_new(export, move |_, _, _, _| {
                        Err(wasmtime::format_err!(
                            "the operator called `{function}`, which weir does not provide to \
                             operators"
                        ))
                    })?;
                }
                ComponentItem::Resource(_) => {
                    interface.resource(export, ResourceType::host::<()>(), |_, _| Ok(()))?
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The temporary file a process writes a cache entry into before renaming it into place.
fn temporary(file: &Path, pid: u32) -> PathBuf {
    file.with_extension(format!("tmp{pid}"))
}

/// Removes the temporary files of cache writes whose process is gone (killed, or exited on a
/// Ctrl-C while it compiled): nothing reads them, and each is as large as a compiled
/// component. A file of a process that still runs is being written and is left alone; where
/// there is no `/proc` to tell, every one is left.
fn remove_abandoned_writes(dir: &Path) {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(pid) = (path.extension().and_then(|e| e.to_str()))
            .and_then(|e| e.strip_prefix("tmp"))
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !proc.join(pid.to_string()).exists() {
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(file = %path.display(), "removed an abandoned cache write")
                }
                Err(e) => {
                    tracing::warn!(file = %path.display(), "cannot remove an abandoned cache write: {e}")
                }
            }
        }
    }
}

fn write_atomically(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = file.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = temporary(file, std::process::id());
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, file)
}

/// Tells empty files, non-wasm files and core modules from components before compiling.
fn check_header(path: &Path, bytes: &[u8]) -> Result<(), WasmError> {
    let path = path.to_path_buf();
    if bytes.is_empty() {
        return Err(WasmError::Empty { path });
    }
    if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
        return Err(WasmError::NotWasm { path });
    }
    // The 4 bytes after the magic: version 1, layer 0 for core modules; layer 1 for components.
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(WasmError::CoreModule { path });
    }
    Ok(())
}

/// The names a component imports and exports (its own, not those of components inside it).
fn component_names(path: &Path, wasm: &[u8]) -> Result<(Vec<String>, Vec<String>), WasmError> {
    let invalid = |e: wasmparser::BinaryReaderError| WasmError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    // Modules and components nested in this one, the parser being inside them.
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.map_err(invalid)? {
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) if depth == 0 => break,
            wasmparser::Payload::End(_) => depth -= 1,
            wasmparser::Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    imports.push(import.map_err(invalid)?.name.name.to_owned());
                }
            }
            wasmparser::Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    exports.push(export.map_err(invalid)?.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok((imports, exports))
}

/// Checks, before compiling, that the component exports this host's operator interface and
/// imports nothing unknown; returns its imports.
fn check_world(path: &Path, wasm: &[u8]) -> Result<Vec<String>, WasmError> {
    let (imports, exports) = component_names(path, wasm)?;
    let exports: Vec<&str> = exports.iter().map(String::as_str).collect();
    if !exports.contains(&OPERATOR_EXPORT) {
        if let Some(other) = exports
            .iter()
            .find_map(|e| e.strip_prefix("weir:stream/operator@"))
        {
            return Err(WasmError::WrongVersion {
                path: path.to_path_buf(),
                found: other.to_string(),
            });
        }
        return Err(WasmError::WrongWorld {
            path: path.to_path_buf(),
            exports: if exports.is_empty() {
                "none".into()
            } else {
                exports.join(", ")
            },
        });
    }
    let mut unknown = Vec::new();
    for import in &imports {
        let ours = import
            .strip_prefix("weir:stream/")
            .is_some_and(|rest| rest.ends_with(&format!("@{WIT_VERSION}")));
        if let Some(found) = import
            .strip_prefix("weir:stream/")
            .and_then(|rest| rest.split_once('@'))
            .map(|(_, v)| v)
            .filter(|_| !ours)
        {
            return Err(WasmError::WrongVersion {
                path: path.to_path_buf(),
                found: found.to_string(),
            });
        }
        let wasi = LINKED_WASI
            .iter()
            .chain(DENIED_WASI)
            .any(|p| import.starts_with(p));
        if !ours && !wasi {
            unknown.push(import);
        }
    }
    if !unknown.is_empty() {
        return Err(WasmError::UnknownImport {
            path: path.to_path_buf(),
            imports: unknown.iter().map(|i| i.to_string()).collect(),
        });
    }
    Ok(imports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_compile_at_a_time_and_the_next_waits_at_most_its_limit() {
        let slot = Arc::new(CompileSlot::default());
        assert!(slot.take(Duration::ZERO));
        let held = SlotHeld(slot.clone());
        assert!(!slot.take(Duration::from_millis(20)), "taken");
        let waiter = {
            let slot = slot.clone();
            std::thread::spawn(move || slot.take(Duration::from_secs(60)))
        };
        drop(held);
        assert!(waiter.join().unwrap(), "freed for the one waiting");
        assert!(!slot.take(Duration::ZERO), "taken by the waiter");
    }

    #[test]
    fn abandoned_cache_writes_are_removed_and_live_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let entry = dir.path().join("ab12-cd34.cwasm");
        std::fs::write(&entry, b"compiled").unwrap();
        // No process has a pid above the kernel's limit (at most 2^22).
        let dead = temporary(&entry, u32::MAX);
        let live = temporary(&entry, std::process::id());
        let other = dir.path().join("notes.tmpfile");
        for f in [&dead, &live, &other] {
            std::fs::write(f, b"partial").unwrap();
        }
        remove_abandoned_writes(dir.path());
        assert!(!dead.exists(), "the write of a process that is gone");
        assert!(live.exists(), "a write under way");
        assert!(entry.exists() && other.exists(), "files not of a write");
    }

    #[test]
    fn the_world_is_of_this_wit_version() {
        assert!(WORLD.ends_with(&format!("@{WIT_VERSION}")));
        assert_eq!(OPERATOR_EXPORT.replace("operator", "processor"), WORLD);
    }

    #[test]
    fn header_checks() {
        let p = Path::new("x.wasm");
        assert!(matches!(check_header(p, b""), Err(WasmError::Empty { .. })));
        assert!(matches!(
            check_header(p, b"hello world"),
            Err(WasmError::NotWasm { .. })
        ));
        assert!(matches!(
            check_header(p, b"\0asm\x01\0\0\0"),
            Err(WasmError::CoreModule { .. })
        ));
        assert!(check_header(p, b"\0asm\x0d\0\x01\0").is_ok());
    }
}
