//! Uploaded components, content-addressed: `<data>/components/<sha256>.wasm` beside its record
//! `<sha256>.json`. An upload streams into a temporary file within the size limit, is hashed as
//! it comes, and is validated and compiled (as `weir validate` would) before it is kept under
//! its hash; an invalid one leaves nothing behind.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::api::ComponentInfo;
use super::error::{ErrorCode, ServiceError};
use super::store::{check_name, now_ms, read_json, write_json};
use crate::wasm::{Limits, WORLD, WasmEngine};

/// What the service keeps of a component besides its bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    sha256: String,
    size_bytes: u64,
    name: Option<String>,
    version: Option<String>,
    world: String,
    imports: Vec<String>,
    uploaded_ms: u64,
    /// Other names (and versions) the same bytes were uploaded under later.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    aliases: Vec<Alias>,
}

/// A later name of a component's bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Alias {
    name: String,
    version: Option<String>,
    uploaded_ms: u64,
}

impl Record {
    /// Every name the component was uploaded under: name, version and when.
    fn names(&self) -> impl Iterator<Item = (&str, Option<&str>, u64)> {
        let first = (self.name.as_deref()).map(|n| (n, self.version.as_deref(), self.uploaded_ms));
        let aliases =
            (self.aliases.iter()).map(|a| (a.name.as_str(), a.version.as_deref(), a.uploaded_ms));
        first.into_iter().chain(aliases)
    }

    /// Whether it was uploaded under `name` and `version`.
    fn is_named(&self, name: &str, version: Option<&str>) -> bool {
        self.names().any(|(n, v, _)| n == name && v == version)
    }
}

/// The component store.
#[derive(Debug)]
pub(crate) struct Components {
    dir: PathBuf,
    engine: Arc<WasmEngine>,
    /// What an upload is checked against (`wasm_size` bounds its size).
    limits: Limits,
    records: Mutex<BTreeMap<String, Record>>,
}

/// An upload on its way to disk.
#[derive(Debug)]
pub struct Upload {
    file: File,
    path: PathBuf,
    hasher: Sha256,
    size: u64,
    limit: u64,
    name: Option<String>,
    version: Option<String>,
}

impl Drop for Upload {
    fn drop(&mut self) {
        // Kept only by `finish`, which renames it away first.
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Upload {
    /// Appends `chunk`; refuses to go past the size limit.
    pub fn write(&mut self, chunk: &[u8]) -> Result<(), ServiceError> {
        self.size += chunk.len() as u64;
        if self.size > self.limit {
            return Err(ServiceError::new(
                ErrorCode::TooLarge,
                format!(
                    "the component is larger than the limit of {} bytes (`weir serve \
                     --max-component-size`, the `wasm_size` limit)",
                    self.limit
                ),
            ));
        }
        self.hasher.update(chunk);
        self.file
            .write_all(chunk)
            .map_err(|e| ServiceError::io("write", &self.path, e))
    }
}

impl Components {
    /// The store in `dir` (created if missing), with what it holds.
    pub(crate) fn open(
        dir: PathBuf,
        engine: Arc<WasmEngine>,
        limits: Limits,
    ) -> Result<Components, ServiceError> {
        std::fs::create_dir_all(&dir).map_err(|e| ServiceError::io("create", &dir, e))?;
        let mut records = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| ServiceError::io("list", &dir, e))? {
            let path = entry.map_err(|e| ServiceError::io("list", &dir, e))?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with(".upload-") {
                // An upload the process did not finish.
                let _ = std::fs::remove_file(&path);
            } else if name.ends_with(".json") {
                let record: Record = read_json(&path)?;
                if dir.join(format!("{}.wasm", record.sha256)).exists() {
                    records.insert(record.sha256.clone(), record);
                }
            }
        }
        Ok(Components {
            dir,
            engine,
            limits,
            records: Mutex::new(records),
        })
    }

    fn records(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts an upload of a component called `name` at `version` (both optional).
    pub(crate) fn begin(
        &self,
        name: Option<String>,
        version: Option<String>,
    ) -> Result<Upload, ServiceError> {
        if let Some(name) = &name {
            check_name("component name", name)?;
        }
        match (&name, &version) {
            (None, Some(_)) => {
                return Err(ServiceError::invalid(
                    "a component version needs a name: give `name` too",
                ));
            }
            (_, Some(v)) => check_name("component version", v)?,
            _ => {}
        }
        let path = self.dir.join(format!(".upload-{}", super::store::new_id()));
        let file = File::create(&path).map_err(|e| ServiceError::io("create", &path, e))?;
        Ok(Upload {
            file,
            path,
            hasher: Sha256::new(),
            size: 0,
            limit: self.limits.wasm_size.as_u64(),
            name,
            version,
        })
    }

    /// Validates and compiles a finished upload and keeps it. Uploading bytes the store has
    /// already answers the component as it is, with the upload's name and version added (as
    /// the newest upload under that name).
    pub(crate) fn finish(&self, mut upload: Upload) -> Result<ComponentInfo, ServiceError> {
        upload
            .file
            .sync_all()
            .map_err(|e| ServiceError::io("sync", &upload.path, e))?;
        let sha256 = format!("{:x}", upload.hasher.clone().finalize());
        // Checked before the compile (seconds), and again with the record written: an upload
        // of other bytes under the same name and version may have finished in between.
        let check_free = |records: &BTreeMap<String, Record>| match (&upload.name, &upload.version)
        {
            (Some(name), version)
                if records
                    .values()
                    .any(|r| r.sha256 != sha256 && r.is_named(name, version.as_deref())) =>
            {
                Err(ServiceError::conflict(format!(
                    "component {} is taken by other bytes; upload this one under another \
                     version",
                    label(name, version.as_deref())
                )))
            }
            _ => Ok(()),
        };
        check_free(&self.records())?;
        let component = self.engine.load(&upload.path, &self.limits).map_err(|e| {
            let message = e
                .to_string()
                .replace(&upload.path.display().to_string(), "the uploaded component");
            ServiceError::new(ErrorCode::InvalidComponent, message)
        })?;
        let wasm = self.dir.join(format!("{sha256}.wasm"));
        let mut records = self.records();
        check_free(&records)?;
        let record = match (records.get(&sha256), upload.name.take()) {
            (Some(existing), None) => existing.clone(),
            (Some(existing), Some(name)) if existing.name.is_some() => {
                let mut record = existing.clone();
                if !record.is_named(&name, upload.version.as_deref()) {
                    record.aliases.push(Alias {
                        name,
                        version: upload.version.take(),
                        uploaded_ms: now_ms(),
                    });
                }
                record
            }
            (_, name) => Record {
                sha256: sha256.clone(),
                size_bytes: upload.size,
                name,
                version: upload.version.take(),
                world: WORLD.to_string(),
                imports: component.imports().to_vec(),
                uploaded_ms: now_ms(),
                aliases: Vec::new(),
            },
        };
        if !wasm.exists() {
            std::fs::rename(&upload.path, &wasm).map_err(|e| ServiceError::io("keep", &wasm, e))?;
        }
        write_json(&self.dir.join(format!("{sha256}.json")), &record)?;
        records.insert(sha256, record.clone());
        Ok(info(record, Vec::new()))
    }

    /// Every component, with the jobs that use each (`used_by`: sha256 → job ids).
    pub(crate) fn list(&self, used_by: &BTreeMap<String, Vec<String>>) -> Vec<ComponentInfo> {
        self.records()
            .values()
            .map(|r| {
                info(
                    r.clone(),
                    used_by.get(&r.sha256).cloned().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The component `sha256`.
    pub(crate) fn get(
        &self,
        sha256: &str,
        used_by: Vec<String>,
    ) -> Result<ComponentInfo, ServiceError> {
        let record = self.records().get(sha256).cloned();
        record
            .map(|r| info(r, used_by))
            .ok_or_else(|| unknown(&format!("sha256:{sha256}")))
    }

    /// Deletes component `sha256` (the caller checked that no job uses it).
    pub(crate) fn delete(&self, sha256: &str) -> Result<(), ServiceError> {
        let mut records = self.records();
        if records.remove(sha256).is_none() {
            return Err(unknown(&format!("sha256:{sha256}")));
        }
        for ext in ["json", "wasm"] {
            let path = self.dir.join(format!("{sha256}.{ext}"));
            std::fs::remove_file(&path).map_err(|e| ServiceError::io("delete", &path, e))?;
        }
        Ok(())
    }

    /// The sha256 of the component a spec names: `sha256:<hex>`, `name@version`, or `name`
    /// (its newest upload).
    pub(crate) fn resolve(&self, reference: &str) -> Result<String, String> {
        let records = self.records();
        if let Some(hex) = reference.strip_prefix("sha256:") {
            return if records.contains_key(hex) {
                Ok(hex.to_string())
            } else {
                Err(format!(
                    "no component sha256:{hex} was uploaded; upload it first (`weir upload`)"
                ))
            };
        }
        let (name, version) = match reference.split_once('@') {
            Some((n, v)) => (n, Some(v)),
            None => (reference, None),
        };
        (records.values())
            .flat_map(|r| r.names().map(move |named| (r, named)))
            .filter(|(_, (n, v, _))| *n == name && (version.is_none() || *v == version))
            .max_by_key(|(_, (_, _, uploaded_ms))| *uploaded_ms)
            .map(|(r, _)| r.sha256.clone())
            .ok_or_else(|| {
                if reference.ends_with(".wasm") || reference.contains('/') {
                    format!(
                        "no component is named {reference:?}, which looks like a file: the \
                         server runs uploaded components only; upload the file first (`weir \
                         submit` uploads the .wasm files a spec names) and name it by \
                         `sha256:<hex>` or by the name it was uploaded under"
                    )
                } else {
                    format!(
                        "no component {reference:?} was uploaded; upload it (`weir upload \
                         --name {name}`), or name it by `sha256:<hex>`"
                    )
                }
            })
    }

    /// Where the bytes of component `sha256` are.
    pub(crate) fn path(&self, sha256: &str) -> PathBuf {
        self.dir.join(format!("{sha256}.wasm"))
    }
}

fn label(name: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => format!("{name}@{v}"),
        None => name.to_string(),
    }
}

fn unknown(what: &str) -> ServiceError {
    ServiceError::not_found(format!(
        "no component {what}; list them with GET /v1/components"
    ))
}

fn info(r: Record, used_by: Vec<String>) -> ComponentInfo {
    ComponentInfo {
        sha256: r.sha256,
        size_bytes: r.size_bytes,
        name: r.name,
        version: r.version,
        world: r.world,
        imports: r.imports,
        uploaded_ms: r.uploaded_ms,
        aliases: (r.aliases.iter())
            .map(|a| label(&a.name, a.version.as_deref()))
            .collect(),
        used_by,
    }
}
